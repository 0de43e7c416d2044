//! One flush per request on the OAuth and browser routes: the handler's store writes skip
//! their own flush and are made durable together before the response is handed to the
//! connection (see `store::batched`). A failed flush turns the response into a 500, so
//! nothing the handler decided is announced unless it is on disk.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::app::App;
use crate::store;

/// The middleware.
pub async fn batch(State(app): State<App>, req: Request, next: Next) -> Response {
    match store::batched(&app.store, next.run(req)).await {
        Ok(resp) => resp,
        Err(e) => {
            tracing::error!(error = %e, "final flush failed; response withheld");
            let mut resp = (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the server could not save this change; try again",
            )
                .into_response();
            resp.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp
        }
    }
}
