//! `POST /revoke` (RFC 7009): a client ends one of its own tokens. What a revocation ends is
//! `flows::revoke`'s.

use std::net::IpAddr;

use super::authenticate_client;
use crate::app::App;
use crate::audit::AuditEvent;
use crate::flows::FlowError;
use crate::flows::revoke::revoke_family;
use crate::ids::{AccessToken, RefreshToken};
use crate::oauth::grant;
use crate::oauth::request::Params;
use crate::store::{access_tokens, families};

/// Handles `/revoke` (RFC 7009): 200 whether or not the token was valid.
pub async fn revoke(
    app: &App,
    authorization: Option<&str>,
    ip: Option<IpAddr>,
    body: &str,
) -> Result<(), FlowError> {
    let p = Params::parse(body)?;
    let client = authenticate_client(app, authorization, ip, &p).await?;
    let token = p.require("token", "token is required")?;
    if let Some(rt) = token
        .strip_prefix(grant::REFRESH_PREFIX)
        .map(|_| RefreshToken::new(token))
    {
        let Some(family_id) = grant::refresh_family(&rt) else {
            return Ok(());
        };
        let Some(fam) = families::get(app.store.as_ref(), &family_id).await? else {
            return Ok(());
        };
        // A token that would still be honoured (a head, a replay, a stale copy that would
        // branch) is the holder's to revoke; its whole family ends.
        let valid = grant::decide(
            &fam,
            &rt.hash(),
            app.clock.now(),
            &app.config.tokens.refresh_rules_for(&fam.client_id),
        )
        .honoured();
        if fam.client_id == client.client_id && valid && revoke_family(app, &family_id).await? {
            app.audit
                .record(AuditEvent::TokenRevoked {
                    client_id: client.client_id,
                    kind: "refresh_token",
                })
                .await?;
        }
    } else if token.starts_with(grant::ACCESS_PREFIX) {
        let at = AccessToken::new(token);
        if let Some(rec) = access_tokens::get(app.store.as_ref(), &at).await?
            && rec.client_id == client.client_id
        {
            access_tokens::remove(app.store.as_ref(), &at).await?;
            app.audit
                .record(AuditEvent::TokenRevoked {
                    client_id: client.client_id,
                    kind: "access_token",
                })
                .await?;
        }
    }
    Ok(())
}
