//! TLS to PostgreSQL, as libpq's `sslmode` asks for it.
//!
//! The client library parses `disable`, `prefer` and `require` only, and no certificate
//! options, so [`TlsOptions::split`] takes libpq's TLS parameters out of the URL first and
//! hands the rest on. What each mode means here, as in libpq:
//!
//! | `sslmode` | encrypted | server certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow`, `prefer` (the default) | when the server offers TLS | no |
//! | `require` | always | no (with `sslrootcert`: as `verify-ca`, as libpq does) |
//! | `verify-ca` | always | chain to `sslrootcert` |
//! | `verify-full` | always | chain to `sslrootcert` and the host name |
//!
//! `sslrootcert` is a PEM file of CA certificates, or `system` for the public web CAs
//! (Mozilla's list, built in; libpq allows it with `verify-full` only, and so do we).
//! `sslcert` + `sslkey` present a client certificate. `allow` tries TLS first, where libpq
//! tries plain first: either way a server that offers only one of them is reached.
//!
//! Unchecked modes still verify the handshake's signatures (the server holds the key of the
//! certificate it shows); they do not know whose certificate it is.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;
use woodlark_stdx::tls::AnyCertificate;

use super::PgError;

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, PgError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(PgError::Url(format!(
                    "sslmode={other}: expected disable, allow, prefer, require, verify-ca or \
                     verify-full"
                )));
            }
        })
    }

    /// The mode the client library runs the connection in: whether TLS is tried, and whether
    /// it is a must.
    fn for_client(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow | SslMode::Prefer => "prefer",
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "require",
        }
    }
}

/// Where trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCerts {
    File(PathBuf),
    /// `sslrootcert=system`: the public web CAs.
    System,
}

/// The TLS half of a `postgres://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    pub mode: SslMode,
    pub root_certs: Option<RootCerts>,
    /// `sslcert` and `sslkey`: a client certificate chain and its key (PEM files).
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// How the server's certificate is judged, after the mode and root certificates are put
/// together.
enum Check {
    None,
    Chain(Arc<RootCertStore>),
    ChainAndName(Arc<RootCertStore>),
}

impl TlsOptions {
    /// Takes libpq's TLS parameters out of `url`; gives back the URL the client library
    /// reads (its own `sslmode` value in place of ours) and the options.
    pub fn split(url: &str) -> Result<(String, TlsOptions), PgError> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut kept = Vec::new();
        let mut mode = SslMode::Prefer;
        let (mut root, mut cert, mut key) = (None, None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decoded = || {
                percent_encoding::percent_decode_str(value)
                    .decode_utf8()
                    .map(|v| v.into_owned())
                    .map_err(|_| PgError::Url(format!("{name}: not UTF-8 once decoded")))
            };
            match name {
                "sslmode" => mode = SslMode::parse(&decoded()?)?,
                "sslrootcert" => {
                    let value = decoded()?;
                    root = Some(if value == "system" {
                        RootCerts::System
                    } else {
                        RootCerts::File(PathBuf::from(value))
                    });
                }
                "sslcert" => cert = Some(PathBuf::from(decoded()?)),
                "sslkey" => key = Some(PathBuf::from(decoded()?)),
                _ => kept.push(pair),
            }
        }
        let client_cert = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(PgError::Url(
                    "sslcert and sslkey go together: the certificate and its private key".into(),
                ));
            }
        };
        if root == Some(RootCerts::System) && mode != SslMode::VerifyFull {
            return Err(PgError::Url(
                "sslrootcert=system trusts every public CA, so it needs sslmode=verify-full \
                 (the host name checked too), as in libpq"
                    .into(),
            ));
        }
        if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root.is_none() {
            return Err(PgError::Url(format!(
                "sslmode={}: name the CA to trust with sslrootcert=/path/to/ca.pem (or \
                 sslrootcert=system for the public CAs)",
                if mode == SslMode::VerifyCa {
                    "verify-ca"
                } else {
                    "verify-full"
                }
            )));
        }
        let client_mode = format!("sslmode={}", mode.for_client());
        kept.push(&client_mode);
        let rest = format!("{base}?{}", kept.join("&"));
        Ok((
            rest,
            TlsOptions {
                mode,
                root_certs: root,
                client_cert,
            },
        ))
    }

    /// The connector for these options: certificate files are read now, so a renewed
    /// certificate is picked up by the next connection.
    pub fn connector(&self) -> Result<MakeRustlsConnect, PgError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = match &self.root_certs {
            None => None,
            Some(RootCerts::System) => Some(Arc::new(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            })),
            Some(RootCerts::File(path)) => Some(Arc::new(read_roots(path)?)),
        };
        let check = match (self.mode, roots) {
            (SslMode::VerifyFull, Some(roots)) => Check::ChainAndName(roots),
            // libpq: `require` with a root certificate file is `verify-ca`.
            (SslMode::VerifyCa | SslMode::Require, Some(roots)) => Check::Chain(roots),
            _ => Check::None,
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| PgError::Url(format!("TLS: {e}")))?;
        let builder = match check {
            Check::ChainAndName(roots) => builder.with_root_certificates(roots),
            Check::Chain(roots) => {
                let chain = WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| PgError::Url(format!("sslrootcert: {e}")))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnly(chain)))
            }
            Check::None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider))),
        };
        let config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| file_error("sslcert", cert, e))?;
                let key =
                    PrivateKeyDer::from_pem_file(key).map_err(|e| file_error("sslkey", key, e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| PgError::Url(format!("sslcert/sslkey: {e}")))?
            }
        };
        Ok(MakeRustlsConnect::new(config))
    }
}

fn read_roots(path: &Path) -> Result<RootCertStore, PgError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error("sslrootcert", path, e))?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(PgError::Url(format!(
            "sslrootcert {}: no CA certificate in it",
            path.display()
        )));
    }
    Ok(roots)
}

fn file_error(what: &str, path: &Path, e: rustls::pki_types::pem::Error) -> PgError {
    PgError::Url(format!("{what} {}: {e}", path.display()))
}

/// `verify-ca`: the chain must lead to a trusted CA; the name in it is not compared with the
/// host's (the CA is trusted to issue only the database's certificates).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The chain is checked before the name: a name error means the chain was good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> Result<(String, TlsOptions), String> {
        TlsOptions::split(url).map_err(|e| e.to_string())
    }

    #[test]
    fn libpq_parameters_are_taken_out_and_the_rest_kept() {
        let (rest, options) = split(
            "postgres://u:p@db:5432/ci?application_name=w&sslmode=verify-full&\
             sslrootcert=%2Fetc%2Fca.pem&sslcert=/c.pem&sslkey=/k.pem&connect_timeout=5",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://u:p@db:5432/ci?application_name=w&connect_timeout=5&sslmode=require"
        );
        assert_eq!(options.mode, SslMode::VerifyFull);
        assert_eq!(
            options.root_certs,
            Some(RootCerts::File("/etc/ca.pem".into()))
        );
        assert_eq!(
            options.client_cert,
            Some(("/c.pem".into(), "/k.pem".into()))
        );
        let (rest, options) = split("postgres://u@db/ci").unwrap();
        assert_eq!(rest, "postgres://u@db/ci?sslmode=prefer", "libpq's default");
        assert_eq!(options.mode, SslMode::Prefer);
        let (rest, _) = split("postgres://u@db/ci?sslmode=allow").unwrap();
        assert!(rest.ends_with("?sslmode=prefer"));
        let (rest, _) = split("postgres://u@db/ci?sslmode=disable").unwrap();
        assert!(rest.ends_with("?sslmode=disable"));
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_with_the_fix() {
        let e = split("postgres://u@db/ci?sslmode=verify_full").unwrap_err();
        assert!(e.contains("expected disable, allow"), "{e}");
        let e = split("postgres://u@db/ci?sslmode=verify-full").unwrap_err();
        assert!(e.contains("sslrootcert=/path/to/ca.pem"), "{e}");
        let e = split("postgres://u@db/ci?sslmode=verify-ca").unwrap_err();
        assert!(e.contains("sslmode=verify-ca"), "{e}");
        let e = split("postgres://u@db/ci?sslmode=require&sslrootcert=system").unwrap_err();
        assert!(e.contains("verify-full"), "{e}");
        let e = split("postgres://u@db/ci?sslcert=/c.pem").unwrap_err();
        assert!(e.contains("go together"), "{e}");
        let (_, options) = split("postgres://u@db/ci?sslmode=verify-ca&sslrootcert=/nope").unwrap();
        let e = options.connector().err().unwrap().to_string();
        assert!(e.contains("sslrootcert /nope"), "{e}");
    }

    /// Every mode against the test cluster (TLS on, certificates from its own CA for
    /// `db.woodlark.test` and `127.0.0.1`): what is checked, what is refused, and that the
    /// session really is encrypted.
    #[test]
    fn each_mode_does_what_libpq_does_against_a_real_server() {
        use crate::pg::testing::{CERT_USER, Cluster, USER, issue, test_ca};
        let cluster = Cluster::shared();
        let port = cluster.port();
        let ca = cluster.ca_file().display().to_string();
        let encrypted = |url: String| -> Result<bool, String> {
            let mut client = crate::pg::connect(&url).map_err(|e| e.to_string())?;
            let row = client
                .query_one(
                    "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .unwrap();
            Ok(row.get(0))
        };
        let at =
            |host: &str, query: &str| format!("postgres://{USER}@{host}:{port}/postgres?{query}");

        assert_eq!(encrypted(at("127.0.0.1", "sslmode=disable")), Ok(false));
        assert_eq!(
            encrypted(at("127.0.0.1", "")),
            Ok(true),
            "prefer, the default"
        );
        assert_eq!(encrypted(at("127.0.0.1", "sslmode=allow")), Ok(true));
        assert_eq!(encrypted(at("127.0.0.1", "sslmode=require")), Ok(true));
        let full = format!("sslmode=verify-full&sslrootcert={ca}");
        assert_eq!(
            encrypted(at("127.0.0.1", &full)),
            Ok(true),
            "the IP is in the certificate"
        );
        // "localhost" is not among the certificate's names.
        let e = encrypted(at("localhost", &full)).unwrap_err();
        assert!(e.contains("certificate"), "{e}");
        let chain_only = format!("sslmode=verify-ca&sslrootcert={ca}");
        assert_eq!(encrypted(at("localhost", &chain_only)), Ok(true));

        // Another CA: refused by every mode that checks, `require` with a root file included.
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("other-ca.pem");
        std::fs::write(&other, test_ca("someone else").1).unwrap();
        let other = other.display();
        for mode in ["verify-full", "verify-ca", "require"] {
            let e = encrypted(at(
                "127.0.0.1",
                &format!("sslmode={mode}&sslrootcert={other}"),
            ))
            .unwrap_err();
            assert!(e.contains("UnknownIssuer"), "{mode}: {e}");
        }
        let e = encrypted(at("127.0.0.1", "sslmode=verify-full&sslrootcert=system")).unwrap_err();
        assert!(
            e.contains("UnknownIssuer"),
            "a test CA is no public CA: {e}"
        );

        // A client certificate is the only way in for CERT_USER.
        let mut admin = crate::pg::connect(&at("127.0.0.1", "sslmode=disable")).unwrap();
        admin
            .batch_execute(&format!(
                "DO $$ BEGIN CREATE ROLE {CERT_USER} LOGIN; EXCEPTION WHEN duplicate_object THEN END $$"
            ))
            .unwrap();
        let (cert, key) = cluster.client_cert_files();
        let as_cert_user =
            |query: String| format!("postgres://{CERT_USER}@127.0.0.1:{port}/postgres?{query}");
        assert_eq!(
            encrypted(as_cert_user(format!(
                "{full}&sslcert={}&sslkey={}",
                cert.display(),
                key.display()
            ))),
            Ok(true)
        );
        let e = encrypted(as_cert_user(full.clone())).unwrap_err();
        assert!(e.contains("certificate"), "no certificate, no entry: {e}");
        // A certificate from another CA is refused by the server.
        let (stranger, _) = test_ca("stranger");
        let (cert, key) = issue(&stranger, &[], CERT_USER);
        let (cert_file, key_file) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert_file, cert).unwrap();
        std::fs::write(&key_file, key).unwrap();
        assert!(
            encrypted(as_cert_user(format!(
                "{full}&sslcert={}&sslkey={}",
                cert_file.display(),
                key_file.display()
            )))
            .is_err()
        );
    }

    /// `require` and stronger never fall back to plain text: a server that answers the TLS
    /// request with "no" is left before any password is sent.
    #[test]
    fn a_server_without_tls_is_refused_when_tls_is_required() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..2 {
                let (mut socket, _) = listener.accept().unwrap();
                let mut request = [0u8; 8];
                socket.read_exact(&mut request).unwrap();
                seen.push(request);
                socket.write_all(b"N").unwrap();
                // Whatever comes next must not be a startup message with a password.
                let mut rest = Vec::new();
                let _ = socket.read_to_end(&mut rest);
                assert!(
                    rest.is_empty(),
                    "sent after a refused TLS request: {rest:?}"
                );
            }
            seen
        });
        for query in [
            "sslmode=require",
            "sslmode=verify-ca&sslrootcert=system&sslmode=verify-full",
        ] {
            let url = format!("postgres://u:secret@127.0.0.1:{port}/db?{query}");
            let e = crate::pg::connect(&url).err().expect("refused").to_string();
            assert!(e.contains("TLS") || e.contains("tls"), "{query}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
        for request in server.join().unwrap() {
            // SSLRequest: length 8, code 80877103.
            assert_eq!(request, [0, 0, 0, 8, 4, 210, 22, 47]);
        }
    }
}
