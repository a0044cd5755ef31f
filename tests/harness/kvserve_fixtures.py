"""Test fixtures beside the launcher: --api-keys-file files and openssl-made certificates.

api_keys_file_text() and write_api_keys_file() write kvserve's --api-keys-file from plaintext
keys; Certificates makes a CA, a server certificate for 127.0.0.1 and client certificates with
the openssl command, and its tls() is the kvserve_launch.Tls a KvserveProcess serves them with.
Neither needs grpcio or the stubs.
"""
import hashlib
import os
import subprocess

from kvserve_launch import Tls


def api_keys_file_text(entries):
    """A --api-keys-file in YAML from (plaintext key, tenant, role) entries."""
    lines = []
    for key, tenant, role in entries:
        lines += [f"- key_sha256: {hashlib.sha256(key.encode()).hexdigest()}",
                  f"  tenant: {tenant}", f"  role: {role}"]
    return "\n".join(lines) + "\n"


def write_api_keys_file(path, entries):
    """Writes api_keys_file_text(entries) to path; returns path."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(api_keys_file_text(entries))
    return path


class Certificates:
    """Certificates made with the openssl command in `folder`: a CA "ca"; a server certificate
    "server" for IP 127.0.0.1 that it signs; a client certificate (subject CN=NAME) for each of
    `clients` that it signs; with `foreign_clients`, another CA "other-ca" and client
    certificates it signs. path("NAME.crt") and path("NAME.key") are the files;
    path("openssl.cnf") is a file that is not PEM."""

    def __init__(self, folder, clients=("client",), foreign_clients=()):
        self.folder = folder
        with open(self.path("openssl.cnf"), "w", encoding="utf-8") as f:
            f.write("[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = unused\n"
                    "[ca]\nbasicConstraints = critical, CA:TRUE\n"
                    "keyUsage = critical, keyCertSign, cRLSign\n"
                    "subjectKeyIdentifier = hash\n"
                    "[server]\nbasicConstraints = CA:FALSE\nsubjectAltName = IP:127.0.0.1\n"
                    "keyUsage = critical, digitalSignature, keyEncipherment\n"
                    "extendedKeyUsage = serverAuth\n"
                    "[client]\nbasicConstraints = CA:FALSE\n"
                    "keyUsage = critical, digitalSignature, keyEncipherment\n"
                    "extendedKeyUsage = clientAuth\n")
        cas = ("ca", "other-ca") if foreign_clients else ("ca",)
        for ca in cas:
            self._openssl("req", "-config", "openssl.cnf", "-x509", *self._new_key(ca),
                          "-out", f"{ca}.crt", "-subj", f"/CN=kvserve test {ca}", "-days", "2",
                          "-extensions", "ca")
        signed = [("server", "ca", "server", "kvserve test server")]
        signed += [(name, "ca", "client", name) for name in clients]
        signed += [(name, "other-ca", "client", name) for name in foreign_clients]
        for name, ca, section, common_name in signed:
            self._openssl("req", "-config", "openssl.cnf", "-new", *self._new_key(name),
                          "-out", f"{name}.csr", "-subj", f"/CN={common_name}")
            self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey",
                          f"{ca}.key", "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
                          "-extfile", "openssl.cnf", "-extensions", section)

    @staticmethod
    def _new_key(name):
        return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", f"{name}.key"]

    def _openssl(self, *args):
        subprocess.run(["openssl", *args], cwd=self.folder, check=True,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=60)

    def path(self, name):
        return os.path.join(self.folder, name)

    def tls(self, client=None, client_ca=None):
        """A Tls of the server certificate, verified with "ca"; the launcher's calls present
        the certificate of `client` when given; `client_ca` ("ca") requires client
        certificates it signs (mutual TLS)."""
        return Tls(cert_file=self.path("server.crt"), key_file=self.path("server.key"),
                   ca_file=self.path("ca.crt"),
                   client_ca_file=self.path(client_ca + ".crt") if client_ca else None,
                   client_cert_file=self.path(client + ".crt") if client else None,
                   client_key_file=self.path(client + ".key") if client else None)
