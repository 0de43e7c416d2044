//! A client's own web server on 127.0.0.1 serving its metadata document, which a test can
//! change (body, status, headers) and which counts the requests it got; and a TCP listener
//! that only counts connection attempts (for "nothing was connected to").

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// What the server answers.
#[derive(Clone)]
pub struct Answer {
    /// Status.
    pub status: u16,
    /// Body.
    pub body: String,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
}

#[derive(Default)]
struct Shared {
    answer: Mutex<Option<Answer>>,
    /// Answers at other paths (a key set next to the document).
    others: Mutex<HashMap<String, Answer>>,
    hits: Mutex<Vec<String>>,
}

/// The server.
#[derive(Clone)]
pub struct DocServer {
    shared: Arc<Shared>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

/// The document path.
pub const PATH: &str = "/oauth/client.json";

impl DocServer {
    /// Starts on an ephemeral loopback port.
    pub async fn start() -> DocServer {
        let shared = Arc::new(Shared::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new().fallback(serve).with_state(shared.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        DocServer { shared, base }
    }

    /// The document's URL, which is the client id.
    pub fn client_id(&self) -> String {
        format!("{}{PATH}", self.base)
    }

    /// A valid document for this client id with these redirect URIs.
    pub fn document(&self, name: &str, redirect_uris: &[&str]) -> Value {
        json!({
            "client_id": self.client_id(),
            "client_name": name,
            "redirect_uris": redirect_uris,
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        })
    }

    /// Answer 200 with this JSON.
    pub fn serve_json(&self, doc: &Value, headers: &[(&str, &str)]) {
        self.answer(Answer {
            status: 200,
            body: doc.to_string(),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        });
    }

    /// Answer with anything.
    pub fn answer(&self, a: Answer) {
        *self.shared.answer.lock().unwrap() = Some(a);
    }

    /// Answer at another path (e.g. the client's `jwks_uri`) with this JSON.
    pub fn serve_json_at(&self, path: &str, v: &Value, headers: &[(&str, &str)]) {
        self.shared.others.lock().unwrap().insert(
            path.to_owned(),
            Answer {
                status: 200,
                body: v.to_string(),
                headers: headers
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            },
        );
    }

    /// How often `path` was requested.
    pub fn hits_at(&self, path: &str) -> usize {
        self.shared
            .hits
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    }

    /// Paths requested so far.
    pub fn hits(&self) -> Vec<String> {
        self.shared.hits.lock().unwrap().clone()
    }
}

async fn serve(State(shared): State<Arc<Shared>>, uri: Uri) -> Response {
    shared.hits.lock().unwrap().push(uri.path().to_owned());
    let other = shared.others.lock().unwrap().get(uri.path()).cloned();
    let Some(a) = other.or_else(|| {
        (uri.path() == PATH)
            .then(|| shared.answer.lock().unwrap().clone())
            .flatten()
    }) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut resp = (StatusCode::from_u16(a.status).unwrap(), a.body).into_response();
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (k, v) in a.headers {
        resp.headers_mut().insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(&v).unwrap(),
        );
    }
    resp
}

/// A listener that accepts and counts connections and never answers.
pub struct Tarpit {
    /// Its port on 127.0.0.1.
    pub port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Tarpit {
    /// Starts.
    pub async fn start() -> Tarpit {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((_conn, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
        Tarpit { port, accepted }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}
