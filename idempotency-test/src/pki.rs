//! A throw-away certificate authority and a server certificate it signed, for `127.0.0.1` and
//! `localhost`, made fresh by each test: no client trusts it unless told to (feature `tls`).

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The CA's certificate and the server's certificate and key, in PEM and DER.
pub struct Pki {
    /// The CA certificate (PEM): the root a client must be given to trust the server.
    pub ca_pem: String,
    /// The server certificate (PEM), signed by the CA.
    pub server_cert_pem: String,
    /// The server's private key (PKCS#8 PEM).
    pub server_key_pem: String,
    server_cert_der: CertificateDer<'static>,
    server_key_der: Vec<u8>,
}

impl Pki {
    /// A new CA (ECDSA P-256) and a server certificate for `127.0.0.1` and `localhost`.
    pub fn generate() -> Self {
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("a test certificate");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "idempotency TLS test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("a test certificate"))
            .expect("a test certificate");

        let mut server =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("a test certificate");
        server
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().expect("a test certificate");
        let server_cert = server
            .signed_by(&server_key, &ca)
            .expect("a test certificate");

        Self {
            ca_pem: ca.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            server_cert_der: server_cert.der().clone(),
            server_key_der: server_key.serialize_der(),
        }
    }

    /// An acceptor presenting the server certificate (ring, TLS 1.2 and 1.3).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        use tokio_rustls::rustls::{ServerConfig, crypto::ring};
        let (chain, key) = self.server_identity();
        let config =
            ServerConfig::builder_with_provider(std::sync::Arc::new(ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("a test certificate")
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .expect("a test certificate");
        tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))
    }

    /// The server's certificate chain and key, as rustls takes them.
    pub fn server_identity(&self) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let key = PrivatePkcs8KeyDer::from(self.server_key_der.clone());
        (vec![self.server_cert_der.clone()], key.into())
    }
}
