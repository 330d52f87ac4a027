"""A throw-away PKI: a CA, a serving certificate for 127.0.0.1/localhost and a
client certificate, all signed by the CA.

EC P-256 keys keep generation in the millisecond range, so every server can
have its own CA without slowing the tests down.
"""
import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLIENT_USER = "fakeapi-client"
CLIENT_GROUP = "system:masters"


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn, org=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject, issuer, public_key):
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2)))


def _pem_cert(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_pki(directory):
    """Writes ca.crt/.key, server.crt/.key and client.crt/.key into directory
    and returns their paths by those names."""
    ca_key = _key()
    ca_name = _name("fakeapi-ca")
    ca = (_builder(ca_name, ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
          .add_extension(x509.KeyUsage(
              digital_signature=True, key_cert_sign=True, crl_sign=True,
              content_commitment=False, key_encipherment=False,
              data_encipherment=False, key_agreement=False,
              encipher_only=False, decipher_only=False), True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(
              ca_key.public_key()), False)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn, org, usage, sans):
        key = _key()
        b = (_builder(_name(cn, org), ca_name, key.public_key())
             .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                            True)
             .add_extension(x509.ExtendedKeyUsage([usage]), False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                 ca_key.public_key()), False))
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), False)
        return b.sign(ca_key, hashes.SHA256()), key

    server, server_key = leaf(
        "fakeapi", None, ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.DNSName("localhost"),
         x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client, client_key = leaf(CLIENT_USER, CLIENT_GROUP,
                              ExtendedKeyUsageOID.CLIENT_AUTH, None)
    files = {"ca.crt": _pem_cert(ca), "ca.key": _pem_key(ca_key),
             "server.crt": _pem_cert(server), "server.key": _pem_key(server_key),
             "client.crt": _pem_cert(client), "client.key": _pem_key(client_key)}
    paths = {}
    for name, data in files.items():
        path = os.path.join(directory, name)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                  "wb") as f:
            f.write(data)
        paths[name] = path
    return paths


def client_cert(directory, cn, org=None):
    """Another client certificate for user cn (groups: org), signed by the CA
    that write_pki left in directory: (cert PEM, key PEM), for tests that
    change a client's identity while it runs (certificate rotation)."""
    with open(os.path.join(directory, "ca.crt"), "rb") as f:
        ca = x509.load_pem_x509_certificate(f.read())
    with open(os.path.join(directory, "ca.key"), "rb") as f:
        ca_key = serialization.load_pem_private_key(f.read(), None)
    key = _key()
    cert = (_builder(_name(cn, org), ca.subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                           True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH]), False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), False)
            .sign(ca_key, hashes.SHA256()))
    return _pem_cert(cert), _pem_key(key)
