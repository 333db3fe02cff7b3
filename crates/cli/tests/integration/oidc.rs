//! Tokens from an external OpenID Connect issuer: a real RS256 issuer (keys made here, served
//! over HTTP as discovery document and JWKS) and a Floe that trusts it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rsa::pkcs1v15::SigningKey;
use rsa::signature::{SignatureEncoding, Signer};
use rsa::traits::PublicKeyParts;
use rsa::{RsaPrivateKey, RsaPublicKey};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::harness::{Api, Floe};

const NS: &str = "/catalog/v1/default/namespaces";

struct Issuer {
    url: String,
    key: RsaPrivateKey,
}

impl Issuer {
    async fn start() -> Issuer {
        let key = RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
        let public = RsaPublicKey::from(&key);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let jwks = json!({"keys": [{
            "kty": "RSA", "kid": "test-key", "alg": "RS256", "use": "sig",
            "n": URL_SAFE_NO_PAD.encode(public.n().to_bytes_be()),
            "e": URL_SAFE_NO_PAD.encode(public.e().to_bytes_be()),
        }]});
        let discovery = json!({"issuer": url, "jwks_uri": format!("{url}/jwks")});
        let app = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                axum::routing::get(move || async move { axum::Json(discovery) }),
            )
            .route(
                "/jwks",
                axum::routing::get(move || async move { axum::Json(jwks) }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Issuer { url, key }
    }

    fn token(&self, claims: Value, key: Option<&RsaPrivateKey>) -> String {
        let header = URL_SAFE_NO_PAD
            .encode(json!({"alg": "RS256", "typ": "JWT", "kid": "test-key"}).to_string());
        let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
        let input = format!("{header}.{payload}");
        let signer = SigningKey::<Sha256>::new(key.unwrap_or(&self.key).clone());
        let signature = signer.sign(input.as_bytes()).to_bytes();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    fn claims(&self, sub: &str, aud: &str, exp_in: i64) -> Value {
        let now = chrono_now();
        json!({"iss": self.url, "sub": sub, "aud": aud, "iat": now, "exp": now + exp_in})
    }
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn tokens_from_an_openid_connect_issuer_map_to_principals() {
    let issuer = Issuer::start().await;
    let floe = Floe::start_with(
        "sqlite",
        &[
            ("FLOE_OIDC_ISSUER", &issuer.url),
            ("FLOE_OIDC_AUDIENCE", "floe-api"),
        ],
    )
    .await;
    let root = Api::new(&floe);

    let alice = Api::with_token(
        &floe,
        &issuer.token(issuer.claims("alice", "floe-api", 300), None),
    );
    // Authenticated, but alice holds nothing yet: the warehouse is invisible to her.
    let first = alice.get("/catalog/v1/config?warehouse=default").await;
    assert_eq!(first.status, 404, "{:?}", first.body);
    let principal = root.get("/api/v1/principals/alice").await;
    assert_eq!(
        principal.status, 200,
        "alice became a principal on first sight"
    );
    assert_eq!(principal.body["kind"], "user");

    assert_eq!(
        root.post("/api/v1/roles", json!({"name": "oidc-readers"}))
            .await
            .status,
        201
    );
    let member = root
        .post(
            "/api/v1/roles/oidc-readers/members",
            json!({"principal": "alice"}),
        )
        .await;
    assert_eq!(member.status, 204);
    let granted = root
        .post(
            "/api/v1/grants",
            json!({"role": "oidc-readers", "privilege": "list-namespaces", "on": {"type": "warehouse", "warehouse": "default"}}),
        )
        .await;
    assert_eq!(granted.status, 204);
    assert_eq!(alice.get(NS).await.status, 200);

    let other_key = RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
    let refused = [
        ("wrong audience", issuer.token(issuer.claims("alice", "someone-else", 300), None)),
        ("expired", issuer.token(issuer.claims("alice", "floe-api", -10), None)),
        ("forged signature", issuer.token(issuer.claims("alice", "floe-api", 300), Some(&other_key))),
        (
            "other issuer",
            issuer.token(
                json!({"iss": "http://evil.invalid", "sub": "alice", "aud": "floe-api", "exp": chrono_now() + 300}),
                None,
            ),
        ),
        ("no subject", issuer.token(json!({"iss": issuer.url, "aud": "floe-api", "exp": chrono_now() + 300}), None)),
    ];
    for (what, token) in refused {
        let answer = Api::with_token(&floe, &token).get(NS).await;
        assert_eq!(answer.status, 401, "{what}: {:?}", answer.body);
    }

    // Disabling the principal shuts out its external tokens too.
    assert_eq!(
        root.post("/api/v1/principals/alice/disable", json!({}))
            .await
            .status,
        204
    );
    assert_eq!(alice.get(NS).await.status, 401);
}
