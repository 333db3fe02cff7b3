"""TLS on the PostgreSQL and Flight SQL front doors (`--tls-cert`, `--tls-key`): psycopg
verifies Floe's certificate against a test CA (`sslmode=verify-ca`) and psql connects with
`sslmode=require`; ADBC's Flight SQL driver connects over `grpc+tls` trusting that CA, and a
plaintext Flight client is refused. A key that does not belong to the certificate stops Floe
at start with an error naming the files."""

from __future__ import annotations

import datetime
import glob
import ipaddress
import os
import shutil
import subprocess

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import psycopg
import pytest
from conftest import ROOT_ID, ROOT_SECRET, start_floe, stop_floe
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def write_certificates(directory):
    """A test CA and a server certificate for 127.0.0.1 / localhost it signed."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "floe test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {name: directory / f"{name}.pem" for name in ("ca", "cert", "key", "other-key")}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    pkcs8 = serialization.PrivateFormat.PKCS8
    paths["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption()))
    other = ec.generate_private_key(ec.SECP256R1())
    paths["other-key"].write_bytes(other.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption()))
    return paths


def test_front_doors_speak_tls(tmp_path):
    certs = write_certificates(tmp_path)
    floe = start_floe(tmp_path, extra_args=("--tls-cert", str(certs["cert"]), "--tls-key", str(certs["key"])))
    try:
        # PostgreSQL: the client verifies the chain; the session is encrypted.
        with psycopg.connect(
            host="127.0.0.1",
            port=floe.pg_port,
            user=ROOT_ID,
            password=ROOT_SECRET,
            dbname=floe.warehouse,
            sslmode="verify-ca",
            sslrootcert=str(certs["ca"]),
            connect_timeout=10,
        ) as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SELECT 40 + 2").fetchone() == (42,)
        psql = shutil.which("psql") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"), reverse=True)), None)
        if psql:
            out = subprocess.run(
                [psql, f"host=127.0.0.1 port={floe.pg_port} user={ROOT_ID} dbname={floe.warehouse} sslmode=require",
                 "-tA", "-c", "SELECT 7"],
                env=dict(os.environ, PGPASSWORD=ROOT_SECRET),
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert out.returncode == 0 and out.stdout.strip() == "7", out.stderr

        # Flight SQL: grpc+tls trusting the test CA.
        db_kwargs = {
            "username": ROOT_ID,
            "password": ROOT_SECRET,
            "adbc.flight.sql.client_option.tls_root_certs": certs["ca"].read_text(),
        }
        with flight_sql.connect(f"grpc+tls://127.0.0.1:{floe.flight_port}", db_kwargs=db_kwargs, autocommit=True) as conn:
            with conn.cursor() as cursor:
                cursor.execute("SELECT 6 * 7 AS answer")
                assert cursor.fetchone() == (42,)
        # A plaintext Flight client gets nowhere.
        with pytest.raises(adbc_driver_manager.Error):
            plain = {"username": ROOT_ID, "password": ROOT_SECRET}
            with flight_sql.connect(f"grpc://127.0.0.1:{floe.flight_port}", db_kwargs=plain, autocommit=True) as conn:
                with conn.cursor() as cursor:
                    cursor.execute("SELECT 1")
                    cursor.fetchall()
    finally:
        stop_floe(floe)


def test_a_key_that_does_not_fit_the_certificate_stops_floe(tmp_path):
    certs = write_certificates(tmp_path)
    with pytest.raises(RuntimeError) as failed:
        start_floe(tmp_path, extra_args=("--tls-cert", str(certs["cert"]), "--tls-key", str(certs["other-key"])))
    assert "--tls-cert" in str(failed.value) and "--tls-key" in str(failed.value)
