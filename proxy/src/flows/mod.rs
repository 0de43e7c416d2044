//! Orchestration: each flow reads and writes the store, calls GitHub, and runs the bindings
//! in order. Handlers call these and only map the outcome; protocol rules live in `oauth`,
//! security checks in `bindings`.

pub mod access;
pub mod account;
pub mod admin;
pub mod admission;
pub mod approve;
pub mod authorize;
pub mod callback;
pub mod codes;
pub mod connect;
pub mod consent;
pub mod exchange;
pub mod github_access;
pub mod register;
pub mod revoke;
#[cfg(test)]
mod tests;
pub mod token;

/// Compare-and-swap attempts on one family or code tombstone before giving up under
/// contention.
const CAS_RETRIES: usize = 16;

use crate::bindings::browser_state::StateError;
use crate::crypto::CryptoError;
use crate::github::client::GitHubError;
use crate::github::grants::GrantError;
use crate::oauth::error::OAuthError;
use crate::session::SessionError;
use crate::store::StoreError;

/// A page shown to a person instead of a redirect (before client and redirect URI are
/// verified, or when there is no client to return to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageProblem {
    /// HTTP status.
    pub status: u16,
    /// Title.
    pub title: &'static str,
    /// Plain explanation.
    pub message: &'static str,
}

/// A GitHub account `[access]` does not admit, as its page shows it (403).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAdmitted {
    /// The GitHub login that signed in.
    pub login: String,
    /// Who the server is for, or why GitHub could not confirm it.
    pub message: String,
    /// The org whose SAML SSO must authorize the app (empty otherwise).
    pub org: String,
    /// GitHub's SSO authorization link, checked to point at the configured GitHub.
    pub sso_url: Option<String>,
}

/// Everything a flow can fail with. `http::error` maps each variant to exactly one response.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// Show the person a page.
    #[error("page: {}", .0.title)]
    Page(PageProblem),
    /// Send the browser back to the verified client with an error (URL includes `iss`).
    #[error("error redirect to client")]
    ClientRedirect(String),
    /// The person signed in at GitHub but `[access]` does not admit them.
    #[error("not admitted")]
    NotAdmitted(Box<NotAdmitted>),
    /// An OAuth JSON error (token, registration, revocation endpoints).
    #[error(transparent)]
    OAuth(#[from] OAuthError),
    /// Storage failed (our fault).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Randomness or sealing failed (our fault).
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    /// GitHub failed or refused in a way with no client to tell.
    #[error(transparent)]
    GitHub(#[from] GitHubError),
    /// A token exchange refused with a connect link (HTTP 400 with this JSON body).
    #[error("token exchange refused")]
    ExchangeRefused(serde_json::Value),
    /// The registration policy refused a `POST /register` (closed, or initial access token
    /// missing or wrong).
    #[error("registration refused: {0:?}")]
    RegistrationRefused(register::Refusal),
    /// A `POST /register` that does not fit the budgets of never-used registrations
    /// (`clients::budget`).
    #[error("registration refused: {0:?}")]
    RegistrationBudget(crate::clients::budget::Spent),
}

impl From<SessionError> for FlowError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Store(s) => FlowError::Store(s),
            SessionError::Crypto(c) => FlowError::Crypto(c),
        }
    }
}

impl From<GrantError> for FlowError {
    fn from(e: GrantError) -> Self {
        match e {
            GrantError::Store(s) => FlowError::Store(s),
            GrantError::GitHub(g) => FlowError::GitHub(g),
            GrantError::Missing | GrantError::Broken | GrantError::Crypto => {
                FlowError::Crypto(CryptoError::Open)
            }
        }
    }
}

impl From<StateError> for FlowError {
    fn from(e: StateError) -> Self {
        match e {
            StateError::Store(s) => FlowError::Store(s),
            StateError::Crypto(c) => FlowError::Crypto(c),
            StateError::Missing | StateError::Unknown | StateError::Cookie(_) => {
                FlowError::Page(pages::STATE_REJECTED)
            }
        }
    }
}

/// The pages people may see, in one list so their wording stays consistent.
pub mod pages {
    use super::PageProblem;

    /// Unknown client id at /authorize.
    pub const UNKNOWN_CLIENT: PageProblem = PageProblem {
        status: 400,
        title: "Unknown application",
        message: "The application that sent you here is not registered with this server. Nothing was shared. Go back to the application and try connecting again.",
    };
    /// A URL client id whose metadata document was refused or could not be fetched; `reason`
    /// says which rule (no redirect: the client's redirect URIs are unknown).
    pub const fn client_unverifiable(reason: &'static str) -> PageProblem {
        PageProblem {
            status: 400,
            title: "This application could not be verified",
            message: reason,
        }
    }
    /// A URL client id whose metadata document cannot be had right now for reasons that are
    /// not the client's (fetch budget spent, host unreachable, server error, nothing valid
    /// cached): 503, the page says to retry (with `Retry-After`, like `/token`).
    pub const fn client_unreachable(reason: &'static str) -> PageProblem {
        PageProblem {
            status: 503,
            title: "This application could not be checked right now",
            message: reason,
        }
    }
    /// Redirect URI mismatch or missing.
    pub const BAD_REDIRECT: PageProblem = PageProblem {
        status: 400,
        title: "Invalid redirect address",
        message: "The application asked to send your authorization to an address it did not register. Nothing was shared and you were not redirected.",
    };
    /// Malformed /authorize request before the client is known.
    pub const BAD_REQUEST: PageProblem = PageProblem {
        status: 400,
        title: "Invalid request",
        message: "The authorization request was malformed. Nothing was shared. Go back to the application and try again.",
    };
    /// Consent transaction expired or already decided.
    pub const TXN_GONE: PageProblem = PageProblem {
        status: 400,
        title: "This request has expired",
        message: "This authorization request has expired or was already answered. Nothing was shared. Go back to the application and start again.",
    };
    /// CSRF or cross-site form.
    pub const FORBIDDEN_FORM: PageProblem = PageProblem {
        status: 403,
        title: "Request refused",
        message: "This form was not submitted from this server's own page, so it was refused. Nothing was changed.",
    };
    /// State unknown, replayed, expired, or not bound to this browser.
    pub const STATE_REJECTED: PageProblem = PageProblem {
        status: 400,
        title: "Sign-in could not be completed",
        message: "This sign-in link was not started in this browser, was already used, or has expired. Nothing was shared. If you were trying to connect an application, start again from the application.",
    };
    /// GitHub refused or failed during sign-in.
    pub const GITHUB_FAILED: PageProblem = PageProblem {
        status: 502,
        title: "GitHub sign-in failed",
        message: "GitHub did not complete the sign-in. Nothing was shared. Please try again.",
    };
    /// GitHub issued a token with scopes beyond what the person approved here (it completed
    /// the request with an earlier, broader authorization of this server): refused, revoked
    /// at GitHub, nothing stored.
    pub const GITHUB_SCOPES_EXCEED_CONSENT: PageProblem = PageProblem {
        status: 403,
        title: "GitHub granted more access than you approved",
        message: "GitHub answered with more access to your account than you approved here, because it still remembers an earlier, broader authorization of this server. That access was revoked at GitHub and nothing was stored. To continue, remove this server's authorization in your GitHub settings (Settings, Applications, Authorized OAuth Apps), then try again: GitHub will then ask you for exactly the access listed on this server's consent page.",
    };
    /// Sign-in cancelled at GitHub.
    pub const SIGN_IN_CANCELLED: PageProblem = PageProblem {
        status: 400,
        title: "Sign-in cancelled",
        message: "The sign-in at GitHub was cancelled. Nothing was changed.",
    };
    /// A connect link that is unknown, expired, declined, replaced or used: one page for all.
    pub const LINK_NOT_FOUND: PageProblem = PageProblem {
        status: 404,
        title: "Link not found",
        message: "This link does not exist or is no longer valid. If an agent sent it to you, ask the agent again for a new link.",
    };
    /// A connect link opened by someone other than its person.
    pub const LINK_WRONG_PERSON: PageProblem = PageProblem {
        status: 403,
        title: "This link was made for another account",
        message: "This link was made for someone else. Nothing was changed. Do not act on links other people send you; if you need access, ask your own agent.",
    };
    /// The GitHub account that came back is not the signed-in person's.
    pub const WRONG_GITHUB_ACCOUNT: PageProblem = PageProblem {
        status: 403,
        title: "A different GitHub account came back",
        message: "You signed in to GitHub with a different account than the one you use here. Nothing was connected. Open the link again and choose your own account.",
    };
    /// A session (refresh branch) to end that is not the person's, already ended, or unknown:
    /// one page for all.
    pub const SESSION_NOT_FOUND: PageProblem = PageProblem {
        status: 404,
        title: "Session not found",
        message: "There is no such session among yours: it may have ended already. Nothing was changed. Reload your account page to see your sessions.",
    };
    /// Not found.
    pub const NOT_FOUND: PageProblem = PageProblem {
        status: 404,
        title: "Not found",
        message: "There is nothing at this address.",
    };
}
