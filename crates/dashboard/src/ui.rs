//! The web dashboard's files (SPEC U2), served at `/ui/` by the API's own listener.
//!
//! ```text
//!  GET /ui          ──▶ 308 to /ui/
//!  GET /ui/         ──▶ index.html
//!  GET /ui/{asset}  ──▶ app.js, style.css (anything else: 404 not_found)
//! ```
//!
//! The files are compiled into the binary (`include_str!`): no build step, no CDN, nothing to
//! install beside the binary. The page holds no data: it reads the JSON API with the
//! caller's token (`fetch` with `Authorization`), so serving it needs no token (`auth::need`
//! says `Open`) and every view shows only what that token may read.
//!
//! # Why these headers
//! - `Cache-Control: no-cache`: a browser revalidates, so an upgraded binary's page is
//!   never mixed with an old script.
//! - `Content-Security-Policy`: scripts, styles and connections from this origin only (the
//!   lab's SVG plots are shown as `blob:` images, which run no script; the empty favicon is
//!   a `data:` URL), and no framing
//!   (`frame-ancestors 'none'`), so another site cannot overlay the dashboard (SPEC S6).
//! - `X-Content-Type-Options: nosniff`: each file is only what its type says.
//!
//! The browser guard is unchanged by the dashboard: the page's own requests are same-origin
//! `GET`s, which browsers send without `Origin`, and it sends no body.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};

use muster_http::error::ApiError;

const INDEX_HTML: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const STYLE_CSS: &str = include_str!("../ui/style.css");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' blob: data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page as served: `index.html` saying whether the server asks for tokens, so the page
/// asks for one before its first request instead of after a refusal. The dashboard's routes
/// are in the route table (`routes`).
pub struct Page {
    index: Arc<str>,
}

impl Page {
    /// The page for a server with authentication on or off.
    pub fn new(auth_enabled: bool) -> Arc<Page> {
        let index = if auth_enabled {
            INDEX_HTML.replacen(r#"data-auth="off""#, r#"data-auth="on""#, 1)
        } else {
            INDEX_HTML.to_owned()
        };
        Arc::new(Page { index: index.into() })
    }
}

/// `GET /ui`.
pub async fn redirect() -> Redirect {
    Redirect::permanent("/ui/")
}

/// `GET /ui/`.
pub async fn index_page(State(page): State<Arc<Page>>) -> Response {
    file(Arc::clone(&page.index), "text/html; charset=utf-8")
}

/// `GET /ui/{asset}`.
pub async fn asset(State(page): State<Arc<Page>>, Path(name): Path<String>) -> Response {
    match name.as_str() {
        "index.html" => file(Arc::clone(&page.index), "text/html; charset=utf-8"),
        "app.js" => file(Arc::from(APP_JS), "text/javascript; charset=utf-8"),
        "style.css" => file(Arc::from(STYLE_CSS), "text/css; charset=utf-8"),
        _ => ApiError::not_found(format!(
            "no dashboard file '{}'; the dashboard is at /ui/",
            name.escape_debug()
        ))
        .into_response(),
    }
}

fn file(body: Arc<str>, content_type: &'static str) -> Response {
    let mut response = axum::body::Body::from(bytes::Bytes::from_owner(ArcText(body))).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// Shared page text as a body, without copying it per request.
struct ArcText(Arc<str>);

impl AsRef<[u8]> for ArcText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}
