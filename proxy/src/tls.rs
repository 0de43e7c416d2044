//! TLS termination with rustls: certificate chain and key from PEM files, TLS 1.2 and 1.3 only
//! with rustls' default suites (AEAD and forward-secret only), ALPN `h2` + `http/1.1`. The
//! certificate sits behind a swappable resolver, so a reload (SIGHUP) applies to new handshakes
//! while open connections keep what they negotiated; a failed reload keeps the old one.
//! Handshakes run off the accept loop with a timeout, so a slow client cannot stall others;
//! each source address (IPv6: its /64) may have only a few pending at once, so one host cannot
//! take all the slots; and at the global cap the listener stops accepting (the kernel backlog
//! holds new connections) instead of closing them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, version};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The PEM files the proxy serves HTTPS with (`[server] tls_cert` and `tls_key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl TlsFiles {
    /// `tls_cert` / `tls_key` as written: both (HTTPS) or neither (`None`, plain HTTP behind a
    /// TLS-terminating proxy); one alone is an error pushed into `errs`.
    pub fn from_raw(
        cert: Option<&PathBuf>,
        key: Option<&PathBuf>,
        errs: &mut Vec<String>,
    ) -> Option<TlsFiles> {
        match (cert, key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => {
                errs.push("server.tls_cert and server.tls_key: give both (HTTPS) or neither (plain HTTP behind a TLS-terminating proxy)".to_owned());
                None
            }
        }
    }

    /// The files if they load as a matching pair: checked at configuration time, so a bad pair
    /// is a config error (exit 64) and not a failure after start.
    pub fn loadable(self, errs: &mut Vec<String>) -> Option<TlsFiles> {
        match load_certified_key(&self) {
            Ok(_) => Some(self),
            Err(e) => {
                errs.push(format!("server.tls_cert / tls_key: {e}"));
                None
            }
        }
    }
}

/// How many TLS handshakes may be in progress, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeLimits {
    /// A handshake must complete within this, or the connection is dropped.
    pub timeout: Duration,
    /// Handshakes in progress at once; at this many the listener stops accepting until one
    /// finishes (new connections wait in the kernel backlog).
    pub max_pending: usize,
    /// Handshakes in progress at once from one source (IPv4 address, IPv6 /64); a connection
    /// beyond this is closed at once.
    pub max_pending_per_source: usize,
}

impl Default for HandshakeLimits {
    fn default() -> Self {
        HandshakeLimits {
            timeout: Duration::from_secs(5),
            max_pending: 1024,
            max_pending_per_source: 32,
        }
    }
}

/// Why a certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{path}: {error}")]
    Read {
        /// Which file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// A file is not the PEM expected.
    #[error("{path}: {reason}")]
    Pem {
        /// Which file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the pair (unsupported key type, key not matching the certificate).
    #[error("{cert} / {key}: {error}")]
    Unusable {
        /// Certificate file.
        cert: String,
        /// Key file.
        key: String,
        /// rustls' reason.
        error: rustls::Error,
    },
}

/// The provider used for serving: ring, the same as the rest of the process.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads a certificate chain and its private key from PEM files and checks they belong
/// together.
pub fn load_certified_key(files: &TlsFiles) -> Result<CertifiedKey, TlsError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|error| TlsError::Read {
            path: p.display().to_string(),
            error,
        })
    };
    let cert_path = files.cert.display().to_string();
    let key_path = files.key.display().to_string();
    let cert_pem = read(&files.cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: cert_path.clone(),
            reason: format!("not a PEM certificate chain: {e}"),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            path: cert_path,
            reason: "no CERTIFICATE block found".to_owned(),
        });
    }
    let key_pem = read(&files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
        path: key_path.clone(),
        reason: format!("no PKCS#8, PKCS#1 or SEC1 private key found: {e}"),
    })?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|error| TlsError::Unusable {
        cert: cert_path,
        key: key_path,
        error,
    })
}

/// Hands every handshake the current certificate; [`CertResolver::reload`] swaps it.
#[derive(Debug)]
pub struct CertResolver {
    files: TlsFiles,
    current: RwLock<Arc<CertifiedKey>>,
}

impl CertResolver {
    /// Loads the certificate once.
    pub fn load(files: TlsFiles) -> Result<CertResolver, TlsError> {
        let key = load_certified_key(&files)?;
        Ok(CertResolver {
            files,
            current: RwLock::new(Arc::new(key)),
        })
    }

    /// Reads the files again; on success new handshakes use the new certificate, on failure
    /// the old one stays (and the error is returned for the log).
    pub fn reload(&self) -> Result<(), TlsError> {
        let key = Arc::new(load_certified_key(&self.files)?);
        // A poisoned lock only means a panic elsewhere while swapping an Arc: the value is whole.
        let mut slot = self.current.write().unwrap_or_else(|p| p.into_inner());
        *slot = key;
        Ok(())
    }

    fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The TLS side of the server: configuration plus the reloadable certificate.
#[derive(Clone, Debug)]
pub struct Tls {
    resolver: Arc<CertResolver>,
    config: Arc<ServerConfig>,
}

impl Tls {
    /// Loads the certificate and builds the rustls configuration.
    pub fn new(files: &TlsFiles) -> Result<Tls, TlsError> {
        let resolver = Arc::new(CertResolver::load(files.clone())?);
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&version::TLS13, &version::TLS12])
            .map_err(|error| TlsError::Unusable {
                cert: files.cert.display().to_string(),
                key: files.key.display().to_string(),
                error,
            })?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Tls {
            resolver,
            config: Arc::new(config),
        })
    }

    /// Reloads the certificate from its files, logging the outcome; the old one stays on error.
    pub fn reload(&self) -> Result<(), TlsError> {
        match self.resolver.reload() {
            Ok(()) => {
                tracing::info!(cert = %self.resolver.files.cert.display(), "TLS certificate reloaded");
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "TLS certificate reload failed; keeping the current certificate");
                Err(e)
            }
        }
    }

    /// A listener that completes TLS handshakes on `tcp`, with the default limits.
    pub fn listener(&self, tcp: TcpListener) -> TlsListener {
        self.listener_with(tcp, HandshakeLimits::default())
    }

    /// A listener that completes TLS handshakes on `tcp` within `limits`.
    pub fn listener_with(&self, tcp: TcpListener, limits: HandshakeLimits) -> TlsListener {
        TlsListener {
            tcp,
            acceptor: TlsAcceptor::from(self.config.clone()),
            handshakes: JoinSet::new(),
            limits: HandshakeLimits {
                max_pending: limits.max_pending.max(1),
                max_pending_per_source: limits.max_pending_per_source.max(1),
                ..limits
            },
            sources: HashMap::new(),
            per_source: HashMap::new(),
        }
    }
}

type Handshake = Option<(TlsStream<TcpStream>, SocketAddr)>;

/// Accepts TCP connections and yields them once their TLS handshake has completed.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Handshake>,
    limits: HandshakeLimits,
    /// The source of each pending handshake task.
    sources: HashMap<tokio::task::Id, IpAddr>,
    /// Pending handshakes per source.
    per_source: HashMap<IpAddr, usize>,
}

impl TlsListener {
    fn start_handshake(&mut self, tcp: TcpStream, peer: SocketAddr) {
        let source = crate::limits::bucket_key(peer.ip());
        let pending = self.per_source.entry(source).or_insert(0);
        if *pending >= self.limits.max_pending_per_source {
            // Debug, not warn: the one doing this would also control the log volume.
            tracing::debug!(%peer, "too many TLS handshakes in progress from this source; closing connection");
            return;
        }
        *pending += 1;
        // TCP_NODELAY before the handshake: it is small back-and-forth messages too.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let acceptor = self.acceptor.clone();
        let timeout = self.limits.timeout;
        let task = self.handshakes.spawn(async move {
            match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => Some((stream, peer)),
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    None
                }
            }
        });
        self.sources.insert(task.id(), source);
    }

    /// A handshake task ended (done, failed, timed out or panicked): its source has one
    /// pending handshake less.
    fn finished(&mut self, task: tokio::task::Id) {
        let Some(source) = self.sources.remove(&task) else {
            return;
        };
        if let Some(n) = self.per_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    // Cancel-safe: both awaited operations are, and all state lives in `self`.
    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            // At the cap, leave new connections in the kernel backlog: they are served once a
            // slot frees (at the latest after the handshake timeout) instead of being closed.
            let room = self.handshakes.len() < self.limits.max_pending;
            // `select!` panics when every branch is disabled. Never here: without room,
            // `handshakes.len() >= max_pending >= 1` (`listener_with` clamps it to at least
            // 1), so the second branch is enabled.
            tokio::select! {
                accepted = self.tcp.accept(), if room => match accepted {
                    Ok((tcp, peer)) => self.start_handshake(tcp, peer),
                    Err(e) => accept_error(e).await,
                },
                Some(done) = self.handshakes.join_next_with_id(), if !self.handshakes.is_empty() => {
                    match done {
                        Ok((task, ready)) => {
                            self.finished(task);
                            if let Some(ready) = ready {
                                return ready;
                            }
                        }
                        Err(e) => self.finished(e.id()),
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// Per-connection errors are the peer's business; others (e.g. out of file descriptors) are
/// logged and retried after a pause instead of spinning.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, cert: &str, key: &str) -> TlsFiles {
        let c = dir.join("cert.pem");
        let k = dir.join("key.pem");
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        TlsFiles { cert: c, key: k }
    }

    #[test]
    fn missing_and_garbage_files_are_readable_errors() {
        let dir = tempfile::tempdir().unwrap();
        let absent = TlsFiles {
            cert: dir.path().join("nope.pem"),
            key: dir.path().join("nope.key"),
        };
        let e = load_certified_key(&absent).unwrap_err().to_string();
        assert!(e.contains("nope.pem"), "{e}");
        let f = files(dir.path(), "hello", "world");
        let e = load_certified_key(&f).unwrap_err().to_string();
        assert!(e.contains("no CERTIFICATE block"), "{e}");
        let f = files(
            dir.path(),
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            "not a key",
        );
        let e = load_certified_key(&f).unwrap_err().to_string();
        assert!(e.contains("key.pem") && e.contains("private key"), "{e}");
    }
}
