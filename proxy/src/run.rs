//! Starting the server: everything that can fail is checked before a port is bound (keys,
//! store), then the listener, the expiry sweeper and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use crate::clock::{SharedClock, SystemClock};
use crate::config::{Config, Env, ProcessEnv};
use crate::secrets::Keys;
use crate::store::StoreConfig;
use crate::store::{PgStore, SharedStore, SledStore};
use crate::tls::TlsFiles;

/// How often expired records are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// A start-up failure, reported before serving.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A configuration built at start (the demo's) is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Keys could not be loaded or generated.
    #[error("keys: {0}")]
    Keys(String),
    /// The store could not be opened.
    #[error("store at {path}: {error}")]
    Store {
        /// Where.
        path: String,
        /// Why.
        error: String,
    },
    /// The application could not be wired together (GitHub or backend client, webhook).
    #[error(transparent)]
    App(#[from] crate::app::AppError),
    /// The demo's fake GitHub or demo backend could not start.
    #[error("demo: {0}")]
    Demo(String),
    /// The TLS certificate or key could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// Binding the port failed.
    #[error("listen on {addr}: {error}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
}

/// The application, and what its listeners need of the configuration (`App` holds only what
/// request paths read).
pub struct Prepared {
    /// The application.
    pub app: App,
    /// `[server] listen`.
    pub listen: SocketAddr,
    /// `[admin] listen`.
    pub admin_listen: SocketAddr,
    tls: Option<TlsFiles>,
    shutdown_grace_secs: u64,
    http: crate::http::Settings,
    /// The configuration file a SIGHUP re-reads (its `[[policy]]`); `None`: no reload.
    config_file: Option<PathBuf>,
}

impl Prepared {
    /// A SIGHUP re-reads `path` and, when the whole configuration in it is valid, puts its
    /// tool-call policy in force ([`reload_config`]).
    pub fn reload_from(mut self, path: &Path) -> Prepared {
        self.config_file = Some(path.to_owned());
        self
    }
}

/// Opens the store and loads keys, and builds the application; binds nothing.
pub async fn prepare(config: Config, clock: SharedClock) -> Result<Prepared, StartError> {
    crate::install_crypto_provider();
    let (keys, store): (Keys, SharedStore) = match &config.store {
        StoreConfig::Sled { path, cache_bytes } => {
            let keys = match &config.keys {
                Some(k) => k.clone(),
                None => Keys::load_or_generate(path).map_err(StartError::Keys)?,
            };
            let store =
                SledStore::open_with_cache(path, *cache_bytes, clock.clone()).map_err(|e| {
                    StartError::Store {
                        path: path.display().to_string(),
                        error: e.to_string(),
                    }
                })?;
            (keys, Arc::new(store))
        }
        StoreConfig::Postgres { .. } => {
            let keys = config
                .keys
                .clone()
                .ok_or_else(|| StartError::Keys("[keys] is required with store.url".to_owned()))?;
            (keys, connect_postgres(&config.store, clock.clone()).await?)
        }
    };
    let listen = config.listen;
    let admin_listen = config.admin.listen;
    let tls = config.tls.clone();
    let shutdown_grace_secs = config.shutdown_grace_secs;
    let http = config.http();
    Ok(Prepared {
        app: App::new(config, keys, store, clock)?,
        listen,
        admin_listen,
        tls,
        shutdown_grace_secs,
        http,
        config_file: None,
    })
}

/// Connects to PostgreSQL and applies migrations.
pub async fn connect_postgres(
    store: &StoreConfig,
    clock: SharedClock,
) -> Result<SharedStore, StartError> {
    let StoreConfig::Postgres { url, schema } = store else {
        return Err(StartError::Store {
            path: "store".to_owned(),
            error: "not a PostgreSQL store".to_owned(),
        });
    };
    let pg = PgStore::connect(url, schema.as_deref(), clock)
        .await
        .map_err(|e| StartError::Store {
            path: "store.url".to_owned(),
            error: e.to_string(),
        })?;
    Ok(Arc::new(pg))
}

/// Spawns the background sweeper of expired records (which include registrations that never
/// completed an authorization) and of idle rate-limit buckets.
pub fn spawn_sweeper(app: &App) -> tokio::task::JoinHandle<()> {
    let store = app.store.clone();
    let app = app.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        loop {
            tick.tick().await;
            // Rate-limit buckets that are full again carry no information: forget them.
            app.limits.retain_recent();
            // Unused dynamic registrations expire in the store, so this sweep reaps them too.
            match store.sweep_expired().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(removed = n, "swept expired records"),
                Err(e) => tracing::warn!(error = %e, "sweep failed"),
            }
        }
    })
}

/// How often the anonymous-refusal counts of finished minutes are written (one event per
/// source and refusal per minute, `audit::aggregate`).
const REFUSALS_EVERY: Duration = Duration::from_secs(15);

/// Spawns the writer of anonymous-refusal aggregates: each round writes the minutes that
/// have ended, all under one flush.
pub fn spawn_refusal_writer(app: &App) -> tokio::task::JoinHandle<()> {
    let audit = app.audit.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REFUSALS_EVERY);
        loop {
            tick.tick().await;
            match audit.flush_refusals(false).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(events = n, "anonymous refusals written"),
                Err(e) => tracing::warn!(error = %e, "writing anonymous refusals failed"),
            }
        }
    })
}

/// The two bound listeners: the public one and the admin one (metrics, health, admin API).
#[derive(Debug)]
pub struct Listeners {
    /// Where MCP clients, browsers and backends connect.
    pub main: tokio::net::TcpListener,
    /// The admin listener.
    pub admin: tokio::net::TcpListener,
}

impl Listeners {
    /// Binds exactly these addresses; an address that is taken is an error naming it (an
    /// operator who asked for a port must hear that it is not theirs, never get another one).
    pub async fn bind(main: SocketAddr, admin: SocketAddr) -> Result<Self, StartError> {
        Ok(Self {
            main: bind_exactly(main).await?,
            admin: bind_exactly(admin).await?,
        })
    }
}

/// Binds `addr` or says which address could not be had.
pub async fn bind_exactly(addr: SocketAddr) -> Result<tokio::net::TcpListener, StartError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Bind { addr, error })
}

/// Serves `app` on the bound `listeners` (over TLS when configured) until `shutdown`; then
/// both stop accepting, the main one drains within the grace period (see `shutdown.rs`), the
/// upstream-action events still pending in the group commit are made durable, and the store
/// is flushed.
pub async fn serve_on(
    listeners: Listeners,
    prepared: Prepared,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let Prepared {
        app,
        listen,
        admin_listen: admin_addr,
        tls,
        shutdown_grace_secs,
        http,
        config_file,
    } = prepared;
    let tls = tls.as_ref().map(crate::tls::Tls::new).transpose()?;
    let Listeners {
        main: listener,
        admin: admin_listener,
    } = listeners;
    let addr = listener.local_addr().unwrap_or(listen);
    // Before serving: from here on a SIGHUP reloads instead of terminating the process.
    #[cfg(unix)]
    let reloader = crate::shutdown::reload_on_sighup(
        tls.clone(),
        config_file.map(|path| {
            let app = app.clone();
            let reload: crate::shutdown::OnHangup =
                Arc::new(move || reload_config(&app, &path, &ProcessEnv));
            reload
        }),
    );
    let sweeper = spawn_sweeper(&app);
    let refusals = spawn_refusal_writer(&app);
    let audit = app.audit.clone();
    let store = app.store.clone();
    let drain = app.drain.clone();
    let grace = Duration::from_secs(shutdown_grace_secs);
    // One shutdown signal, fanned out to both listeners and the grace timer.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel();
    let main_stopped = stopped(stop_rx.clone());
    let shutdown = async move {
        main_stopped.await;
        let _ = stopping_tx.send(());
    };
    tracing::info!(%addr, issuer = app.issuer(), tls = tls.is_some(), "serving");
    tracing::info!(
        addr = %admin_listener.local_addr().unwrap_or(admin_addr),
        admin_api = app.config.admin_token.is_some(),
        "admin listener: /metrics, /healthz, /readyz, /admin/api"
    );
    let admin = tokio::spawn(crate::admin::serve(
        admin_listener,
        app.clone(),
        stopped(stop_rx.clone()),
    ));
    // The admin listener gets the same time as the main one from the signal on (grace plus
    // close bound): a slow admin request (a large export) must not hold up the final flush.
    // A task, so the clock starts at the signal, not when the main listener is done.
    let mut admin_deadline = {
        let stop = stopped(stop_rx.clone());
        tokio::spawn(async move {
            stop.await;
            tokio::time::sleep(grace + crate::shutdown::CLOSE_BOUND).await;
        })
    };
    let serving: std::pin::Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>> = match tls {
        Some(tls) => Box::pin(crate::http::serve_tls(
            tls.listener(listener),
            app,
            http,
            shutdown,
        )),
        None => Box::pin(crate::http::serve(listener, app, http, shutdown)),
    };
    let result = crate::shutdown::with_grace(serving, stopping_rx, grace, &drain).await;
    if *stop_rx.borrow() {
        let mut admin = admin;
        tokio::select! {
            done = &mut admin => match done {
                Ok(Err(e)) => tracing::warn!(error = %e, "admin listener failed"),
                Err(e) => tracing::warn!(error = %e, "admin listener task failed"),
                Ok(Ok(())) => {}
            },
            _ = &mut admin_deadline => {
                tracing::warn!("admin requests still running after the grace period; exiting without them");
                admin.abort();
            }
        }
        admin_deadline.abort();
    } else {
        // The main listener failed on its own: the admin one must not outlive it.
        admin.abort();
        admin_deadline.abort();
    }
    sweeper.abort();
    refusals.abort();
    // Both listeners have stopped: no call can record an upstream action any more, so what
    // the background group commit still holds is all there is; make it durable now.
    // Bounded like the listeners' close: a stalled store must not hold the exit forever.
    match tokio::time::timeout(crate::shutdown::CLOSE_BOUND, audit.drain_upstream_actions()).await {
        Ok(pending) => tracing::info!(
            events = pending,
            "pending upstream-action audit events written"
        ),
        Err(_) => tracing::warn!(
            "pending upstream-action audit events not written within the close bound; exiting"
        ),
    }
    // The current minute's anonymous-refusal counts too, before the final flush.
    if let Err(e) = audit.flush_refusals(true).await {
        tracing::error!(error = %e, "writing anonymous refusals at shutdown failed");
    }
    #[cfg(unix)]
    if let Some(r) = reloader {
        r.abort();
    }
    // Requests the shutdown cut off before their final flush write their audit events on
    // tasks of their own (`store::write_at_flush`): their other writes are covered by the
    // flush below, so their events must be too.
    if tokio::time::timeout(
        crate::shutdown::CLOSE_BOUND,
        crate::store::cut_off_writes_done(),
    )
    .await
    .is_err()
    {
        tracing::warn!("cut-off requests' audit events not written within the close bound");
    }
    match store.flush().await {
        Ok(()) => tracing::info!("store flushed; stopped"),
        Err(e) => tracing::error!(error = %e, "final flush failed"),
    }
    result.map_err(|error| StartError::Bind { addr, error })
}

/// SIGHUP: re-reads the configuration file and validates all of it, as at start. Valid: its
/// `[[policy]]` and `[policy_defaults]` are put in force for every call decided from now on
/// (calls already being decided finish with the old one). Invalid or unreadable: every problem
/// is logged and the current policy stays. Never stops the process. The other sections are
/// read only at start: changing them needs a restart.
pub fn reload_config(app: &App, path: &Path, env: &dyn Env) {
    match Config::load(path, env) {
        Ok(config) => {
            for w in config.policy.warnings() {
                tracing::warn!("{w}");
            }
            let description = config.policy.describe();
            app.replace_policy(config.policy);
            tracing::info!(
                policy = %description,
                config = %path.display(),
                "policy reloaded (other sections take effect only on a restart)"
            );
        }
        Err(e) => {
            for problem in &e.0 {
                tracing::error!(config = %path.display(), "{problem}");
            }
            tracing::error!(
                config = %path.display(),
                errors = e.0.len(),
                policy = %app.policy().describe(),
                "configuration reload refused: the current policy stays"
            );
        }
    }
}

/// `serve`: the production entry point; `path` is the configuration file a SIGHUP re-reads.
pub async fn serve(config: Config, path: &Path) -> Result<(), StartError> {
    for w in config.warnings() {
        tracing::warn!("{w}");
    }
    tracing::info!(policy = %config.policy.describe(), "tool-call policy");
    let prepared = prepare(config, Arc::new(SystemClock))
        .await?
        .reload_from(path);
    let listeners = Listeners::bind(prepared.listen, prepared.admin_listen).await?;
    serve_on(listeners, prepared, shutdown_signal()).await
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    crate::shutdown::signal().await;
    tracing::info!("shutdown signal received");
}
