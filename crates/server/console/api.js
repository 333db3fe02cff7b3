// Talking to Floe: the signed-in session and every API call made with its token.
//
// The token lives in this tab's sessionStorage only (never a cookie, so no other site can
// make the browser spend it), and every call names it in an Authorization header.

const SESSION = "floe.console.session";
/** Each warehouse's catalog prefix, from /catalog/v1/config. */
const prefixes = new Map();
const PENDING_OIDC = "floe.console.oidc";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function session() {
  try {
    const s = JSON.parse(sessionStorage.getItem(SESSION));
    if (!s || typeof s.token !== "string") return null;
    if (typeof s.expires === "number" && s.expires <= Date.now()) {
      signOut();
      return null;
    }
    return s;
  } catch {
    return null;
  }
}

function saveSession(token, via, expiresIn) {
  const expires = Date.now() + (Number(expiresIn) || 3600) * 1000;
  sessionStorage.setItem(SESSION, JSON.stringify({ token, via, expires }));
}

/** Forgets the token and everything this tab kept for it (last statement, warehouse, …). */
export function signOut() {
  for (const key of Object.keys(sessionStorage)) {
    if (key.startsWith("floe.console.") && key !== PENDING_OIDC) sessionStorage.removeItem(key);
  }
  prefixes.clear();
}

/** The message of an error answer: Iceberg's ErrorModel, OAuth's error, or the text. */
function errorMessage(status, text) {
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  if (body && typeof body.error === "object" && body.error) {
    const e = body.error;
    return `${e.type ? e.type + ": " : ""}${e.message || `HTTP ${status}`}`;
  }
  if (body && typeof body.error === "string") {
    return body.error_description ? `${body.error}: ${body.error_description}` : body.error;
  }
  if (body && typeof body.message === "string") return body.message;
  return text ? text.slice(0, 500) : `HTTP ${status}`;
}

/** Calls Floe with the session's token; answers the parsed JSON (null for no body). */
export async function api(method, path, body) {
  const s = session();
  const headers = { Accept: "application/json" };
  if (s) headers.Authorization = `Bearer ${s.token}`;
  const init = { method, headers, credentials: "omit", cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  if (response.status === 401 && s) {
    signOut();
    window.dispatchEvent(new Event("floe-signed-out"));
  }
  if (!response.ok) throw new ApiError(response.status, errorMessage(response.status, text));
  return text ? JSON.parse(text, exactIntegers) : null;
}

/** Integers past 2^53 (snapshot ids) keep every digit: they read as their source text. */
function exactIntegers(_key, value, context) {
  if (typeof value === "number" && !Number.isSafeInteger(value) && context && /^-?\d+$/.test(context.source)) {
    return context.source;
  }
  return value;
}

async function tokenRequest(url, form) {
  const response = await fetch(url, {
    method: "POST",
    body: new URLSearchParams(form),
    credentials: "omit",
    cache: "no-store",
  });
  const text = await response.text();
  if (!response.ok) throw new ApiError(response.status, errorMessage(response.status, text));
  const answer = JSON.parse(text);
  if (typeof answer.access_token !== "string") throw new ApiError(502, "the answer holds no access_token");
  return answer;
}

/** Signs in with a client id and secret (OAuth2 client credentials). */
export async function signInWithCredentials(clientId, clientSecret) {
  const answer = await tokenRequest("/catalog/v1/oauth/tokens", {
    grant_type: "client_credentials",
    client_id: clientId,
    client_secret: clientSecret,
    scope: "catalog",
  });
  saveSession(answer.access_token, "client credentials", answer.expires_in);
}

function randomText(bytes) {
  return base64url(crypto.getRandomValues(new Uint8Array(bytes)));
}

function base64url(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function redirectUri() {
  return `${location.origin}/console/`;
}

/** Sends the browser to the issuer (authorization code flow with PKCE). */
export async function startOidc(oidc) {
  if (!crypto.subtle) throw new ApiError(0, "signing in with OpenID Connect needs HTTPS (or localhost)");
  const verifier = randomText(48);
  const state = randomText(24);
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  sessionStorage.setItem(PENDING_OIDC, JSON.stringify({ verifier, state }));
  const url = new URL(oidc["authorization-endpoint"]);
  for (const [k, v] of Object.entries({
    response_type: "code",
    client_id: oidc["client-id"],
    redirect_uri: redirectUri(),
    scope: oidc.scope,
    state,
    code_challenge: base64url(digest),
    code_challenge_method: "S256",
  })) {
    url.searchParams.set(k, v);
  }
  location.assign(url.toString());
}

/** Finishes a sign-in the issuer sent back here with `?code=…&state=…` (or `?error=…`). */
export async function finishOidc(oidc, params) {
  const pending = JSON.parse(sessionStorage.getItem(PENDING_OIDC) || "null");
  sessionStorage.removeItem(PENDING_OIDC);
  history.replaceState(null, "", "/console/");
  // Nothing in an answer this tab did not ask for is shown or used (not even its error text).
  if (!oidc) throw new ApiError(400, "this server does not offer OpenID Connect sign-in");
  if (!pending || params.get("state") !== pending.state) {
    throw new ApiError(400, "the sign-in answer does not belong to a sign-in started in this tab");
  }
  if (params.get("error")) {
    const code = /^[a-z_]{1,64}$/.test(params.get("error")) ? params.get("error") : "an unnamed error";
    throw new ApiError(400, `the issuer refused the sign-in (${code})`);
  }
  const answer = await tokenRequest(oidc["token-endpoint"], {
    grant_type: "authorization_code",
    code: params.get("code") || "",
    redirect_uri: redirectUri(),
    client_id: oidc["client-id"],
    code_verifier: pending.verifier,
  });
  saveSession(answer.access_token, oidc.issuer, answer.expires_in);
}

// Iceberg REST paths: a namespace's levels travel joined by the unit separator.

export async function catalogPrefix(warehouse) {
  if (!prefixes.has(warehouse)) {
    const config = await api("GET", `/catalog/v1/config?warehouse=${encodeURIComponent(warehouse)}`);
    prefixes.set(warehouse, (config.overrides && config.overrides.prefix) || warehouse);
  }
  return prefixes.get(warehouse);
}

export function namespacePath(levels) {
  return encodeURIComponent(levels.join("\u001f"));
}

/** `/catalog/v1/{prefix}/namespaces/{ns}` plus the rest, for a warehouse. */
export async function catalogPath(warehouse, levels, rest = "") {
  const prefix = encodeURIComponent(await catalogPrefix(warehouse));
  const ns = levels && levels.length ? `/${namespacePath(levels)}` : "";
  return `/catalog/v1/${prefix}/namespaces${ns}${rest}`;
}

/** Runs one SQL statement through `/api/v1/sql`. */
export function sql(warehouse, statement) {
  return api("POST", "/api/v1/sql", { sql: statement, warehouse });
}

/** A SQL identifier, quoted. */
export function quoteIdent(name) {
  return `"${String(name).replace(/"/g, '""')}"`;
}
