//! Operations. Each returns `Err` when its answer did not arrive; the model then records only
//! what was confirmed.

use std::sync::Arc;

use serde_json::json;
use tokio::time::Instant;

use crate::support::Pkce;
use crate::support::browser::CookieJar;

use super::ctx::{Answer, Ctx, Fail, Out};
use super::model::{Agent, AgentState, ClientRec, Consent, Fam, FamView, Family, PendingCode, Tok};
use super::{CODE_FRESH, LOGINS, Rng};

pub(super) async fn op_register(ctx: &Ctx, w: usize, rng: &mut Rng) -> Out<()> {
    let login = rng.pick(&LOGINS);
    let redirect_uri = format!("https://agent-{w}-{:x}.example/cb", rng.next());
    let r = ctx
        .http
        .post(ctx.url("/register"))
        .json(&json!({
            "client_name": format!("Crash agent {w}"),
            "redirect_uris": [redirect_uri],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        }))
        .send()
        .await;
    let r = ctx.finish(r, None).await?;
    let Some(id) = (r.status == 201)
        .then(|| r.json()["client_id"].as_str().map(str::to_owned))
        .flatten()
    else {
        ctx.violation(format!("registration answered {}", r.brief()));
        return Ok(());
    };
    let mut m = ctx.m();
    m.stats.registrations += 1;
    m.clients.push(ClientRec {
        id,
        redirect_uri,
        checks: 0,
    });
    let client = m.clients.len() - 1;
    m.agents.push(Agent {
        worker: w,
        client,
        login,
        jar: Arc::new(CookieJar::default()),
        consent: Consent::Never,
        state: AgentState::Active,
        pending_code: None,
        code_before_revoke: None,
        families: Vec::new(),
        checks: 0,
    });
    Ok(())
}

/// Follows GitHub's authorize URL like a person (pick the account, approve GitHub's own
/// consent the first time); returns GitHub's redirect back to the proxy.
pub(super) async fn through_github(
    ctx: &Ctx,
    jar: &CookieJar,
    authorize_url: &str,
    login: &str,
) -> Out<String> {
    let u = url::Url::parse(authorize_url).map_err(|e| Fail::Lost(format!("GitHub URL: {e}")))?;
    let params: Vec<(String, String)> = u.query_pairs().into_owned().collect();
    let base = u.origin().ascii_serialization();
    let fields = |name: &str, value: &str| -> Vec<(String, String)> {
        let mut f: Vec<(String, String)> = params
            .iter()
            .filter(|(k, _)| k != "prompt" && k != "login")
            .cloned()
            .collect();
        f.push((name.to_owned(), value.to_owned()));
        f
    };
    let mut resp = ctx.navigate(authorize_url, Some(jar), "cross-site").await?;
    for (marker, path, name, value) in [
        ("action=\"/login\"", "/login", "login", login),
        (
            "/login/oauth/authorize/decision",
            "/login/oauth/authorize/decision",
            "decision",
            "approve",
        ),
    ] {
        if resp.status == 200 && resp.body.contains(marker) {
            let f = fields(name, value);
            let f: Vec<(&str, &str)> = f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            resp = ctx
                .post_form(&format!("{base}{path}"), &f, Some(jar), &base)
                .await?;
        }
    }
    match (resp.status, resp.location()) {
        (302, Some(loc)) => Ok(loc),
        _ => Err(Fail::Lost(format!("fake GitHub answered {}", resp.brief()))),
    }
}

/// A full authorization in the agent's browser: the consent page (or its remembered skip),
/// GitHub, the callback; then the code's redemption.
pub(super) async fn op_flow(ctx: &Ctx, a: usize, rng: &mut Rng) -> Out<()> {
    let (client_id, redirect_uri, login, jar, consent) = {
        let m = ctx.m();
        let ag = &m.agents[a];
        let c = &m.clients[ag.client];
        (
            c.id.clone(),
            c.redirect_uri.clone(),
            ag.login,
            ag.jar.clone(),
            ag.consent,
        )
    };
    let pkce = Pkce::new();
    let state = format!("st{:x}", rng.next());
    let url = ctx.authorize_url(&client_id, &redirect_uri, &pkce, &state);
    let page = ctx.navigate(&url, Some(&jar), "none").await?;
    let code = match page.status {
        303 => {
            let Some(code) = ctx.code_in(page.location().as_deref(), &redirect_uri, &state) else {
                ctx.violation(format!(
                    "/authorize redirected without a proper code: {:?}",
                    page.location()
                ));
                return Ok(());
            };
            let mut m = ctx.m();
            m.stats.consent_skips += 1;
            match consent {
                Consent::Revoked | Consent::Never => {
                    drop(m);
                    ctx.violation(format!(
                        "client {client_id}: a code was issued without the consent page although the consent is {consent:?}"
                    ));
                }
                Consent::Unsure | Consent::Confirmed => m.agents[a].consent = Consent::Confirmed,
            }
            code
        }
        200 if page.hidden("txn").is_some() => {
            if consent == Consent::Confirmed {
                ctx.violation(format!(
                    "client {client_id}: the consent confirmed earlier (and the sign-in confirmed with it) is not remembered: the consent page was shown again"
                ));
            }
            ctx.m().stats.consent_pages += 1;
            let txn = page.hidden("txn").unwrap_or_default();
            let csrf = page.hidden("csrf").unwrap_or_default();
            // What the consent page's script sends, and the finish page's hands back.
            let proof = mcp_oauth_proxy::crypto::random_token().unwrap();
            let r = ctx
                .post_form(
                    &ctx.url("/consent"),
                    &[
                        ("txn", &txn),
                        ("csrf", &csrf),
                        ("decision", "approve"),
                        ("flow_proof", &proof),
                    ],
                    Some(&jar),
                    &ctx.base,
                )
                .await?;
            let Some(github) = (r.status == 303).then(|| r.location()).flatten() else {
                ctx.violation(format!(
                    "client {client_id}: approving a consent page that was shown was refused: {}",
                    r.brief()
                ));
                return Ok(());
            };
            let back = through_github(ctx, &jar, &github, login).await?;
            let back = format!("{back}&flow_proof={proof}");
            let cb = match ctx.navigate(&back, Some(&jar), "cross-site").await {
                Ok(cb) => cb,
                Err(Fail::NotSent) => return Err(Fail::NotSent),
                Err(e) => {
                    let mut m = ctx.m();
                    if m.agents[a].consent != Consent::Confirmed {
                        m.agents[a].consent = Consent::Unsure;
                    }
                    return Err(e);
                }
            };
            let code = (cb.status == 303)
                .then(|| ctx.code_in(cb.location().as_deref(), &redirect_uri, &state))
                .flatten();
            let Some(code) = code else {
                ctx.violation(format!(
                    "client {client_id}: GitHub's callback was refused: {}",
                    cb.brief()
                ));
                let mut m = ctx.m();
                if m.agents[a].consent != Consent::Confirmed {
                    m.agents[a].consent = Consent::Unsure;
                }
                return Ok(());
            };
            ctx.m().agents[a].consent = Consent::Confirmed;
            code
        }
        _ => {
            ctx.violation(format!(
                "client {client_id} (confirmed registered): /authorize answered {}",
                page.brief()
            ));
            return Ok(());
        }
    };
    {
        let mut m = ctx.m();
        m.stats.codes_issued += 1;
        m.agents[a].pending_code = Some(PendingCode {
            code,
            verifier: pkce.verifier.clone(),
            issued: Instant::now(),
            lost: false,
        });
    }
    op_redeem(ctx, a).await
}

/// Redeems the agent's pending code (confirmed issued to it).
pub(super) async fn op_redeem(ctx: &Ctx, a: usize) -> Out<()> {
    let (client, client_id, redirect_uri, pc) = {
        let m = ctx.m();
        let ag = &m.agents[a];
        let Some(pc) = ag.pending_code.clone() else {
            return Ok(());
        };
        let c = &m.clients[ag.client];
        (ag.client, c.id.clone(), c.redirect_uri.clone(), pc)
    };
    let r = match ctx
        .redeem(&client_id, &redirect_uri, &pc.code, &pc.verifier)
        .await
    {
        Ok(r) => r,
        Err(Fail::NotSent) => return Err(Fail::NotSent),
        Err(e) => {
            if let Some(p) = ctx.m().agents[a].pending_code.as_mut() {
                p.lost = true;
            }
            return Err(e);
        }
    };
    let mut m = ctx.m();
    m.agents[a].pending_code = None;
    if r.status == 200 {
        let j = r.json();
        let (Some(at), Some(rt)) = (j["access_token"].as_str(), j["refresh_token"].as_str()) else {
            drop(m);
            ctx.violation(format!("code redemption without tokens: {}", r.brief()));
            return Ok(());
        };
        if !m.redeemed.insert(pc.code.clone()) {
            m.violations
                .push(format!("client {client_id}: a code was accepted twice"));
        }
        m.stats.codes_redeemed += 1;
        m.families.push(Family {
            agent: a,
            client,
            code: pc.code,
            verifier: pc.verifier,
            chain: vec![rt.to_owned()],
            access: vec![(at.to_owned(), Tok::Live)],
            state: Fam::Live,
            checks: 0,
        });
        let f = m.families.len() - 1;
        m.agents[a].families.push(f);
    } else if !pc.lost && pc.issued.elapsed() < CODE_FRESH {
        drop(m);
        ctx.violation(format!(
            "client {client_id}: a code confirmed to it {:?} ago was refused at its first redemption: {}",
            pc.issued.elapsed(),
            r.brief()
        ));
    }
    Ok(())
}

/// Presents the family's refresh token at `idx`: the current one (rotation expected) or a
/// rotated-away one (refusal expected, which revokes the family; the previous one may only
/// be replayed to exactly its recorded successor).
pub(super) async fn op_present(ctx: &Ctx, f: usize, idx: usize) -> Out<()> {
    let v = ctx.m().view(f);
    let last = v.chain.len() - 1;
    let token = &v.chain[idx];
    let retry = matches!(v.state, Fam::RefreshLost | Fam::ReuseLost(_));
    let r = match ctx.refresh(&v.client_id, token).await {
        Ok(r) => r,
        Err(Fail::NotSent) => return Err(Fail::NotSent),
        Err(e) => {
            // Presenting the current token of a live family can only rotate it. Presenting it
            // again after a lost rotation may meet reuse detection (the family revoked), as
            // may presenting a rotated-away token: then the family's state is unknown.
            let mut m = ctx.m();
            m.families[f].state = match m.families[f].state {
                Fam::Live if idx == last => Fam::RefreshLost,
                Fam::Live | Fam::RefreshLost | Fam::ReuseLost(_) => Fam::ReuseLost(idx),
                other => other,
            };
            return Err(e);
        }
    };
    let mut m = ctx.m();
    m.stats.checks += 1;
    if r.status == 200 {
        let j = r.json();
        let (Some(at), Some(rt)) = (j["access_token"].as_str(), j["refresh_token"].as_str()) else {
            m.families[f].state = Fam::Dead;
            drop(m);
            ctx.violation(format!(
                "refresh answered 200 without tokens: {}",
                r.brief()
            ));
            return Ok(());
        };
        let known = m.rotations.get(token).cloned();
        if let Some(known) = &known
            && known != rt
        {
            m.families[f].state = Fam::Dead;
            drop(m);
            ctx.violation(format!(
                "client {}: the refresh token of generation {idx} yielded two different successors",
                v.client_id
            ));
            return Ok(());
        }
        let fam = &mut m.families[f];
        if idx == last {
            fam.chain.push(rt.to_owned());
            fam.access.push((at.to_owned(), Tok::Live));
            fam.state = Fam::Live;
            m.rotations.insert(token.clone(), rt.to_owned());
            m.stats.refreshes += 1;
        } else if idx + 1 == last && known.is_some() {
            // The immediately previous token, within the grace second: the same successor.
            fam.access.push((at.to_owned(), Tok::Live));
            fam.state = Fam::Live;
            m.stats.replays += 1;
        } else {
            fam.state = Fam::Dead;
            drop(m);
            ctx.violation(format!(
                "client {}: a refresh token rotated away (generation {idx}, current {last}) was accepted again",
                v.client_id
            ));
        }
    } else if r.is_invalid_grant() && (idx < last || retry) {
        // Reuse detection (or the retry of a rotation that did happen): the family is revoked
        // before this answer is sent.
        m.families[f].state = Fam::Revoked(if idx < last {
            "a rotated-away refresh token was presented (reuse detection)"
        } else {
            "its refresh token was presented again after an unconfirmed rotation"
        });
        m.stats.reuse_detected += 1;
    } else {
        m.families[f].state = Fam::Dead;
        drop(m);
        ctx.violation(format!(
            "client {}: the current refresh token (generation {last}, confirmed) of a live family was refused: {}",
            v.client_id,
            r.brief()
        ));
    }
    Ok(())
}

/// `/revoke` of the family's current refresh token.
pub(super) async fn op_revoke(ctx: &Ctx, f: usize) -> Out<()> {
    let v = ctx.m().view(f);
    let token = v.chain.last().cloned().unwrap_or_default();
    let r = match ctx.revoke(&v.client_id, &token).await {
        Ok(r) => r,
        Err(Fail::NotSent) => return Err(Fail::NotSent),
        Err(e) => {
            ctx.m().families[f].state = Fam::RevokeLost;
            return Err(e);
        }
    };
    if r.status == 200 {
        let mut m = ctx.m();
        m.families[f].state = Fam::Revoked("its refresh token was revoked at /revoke");
        m.stats.revoked_refresh += 1;
    } else {
        ctx.violation(format!("/revoke answered {}", r.brief()));
    }
    Ok(())
}

/// `/revoke` of one access token.
pub(super) async fn op_revoke_access(ctx: &Ctx, f: usize, t: usize) -> Out<()> {
    let v = ctx.m().view(f);
    let r = match ctx.revoke(&v.client_id, &v.access[t].0).await {
        Ok(r) => r,
        Err(Fail::NotSent) => return Err(Fail::NotSent),
        Err(e) => {
            ctx.m().families[f].access[t].1 = Tok::RevokeLost;
            return Err(e);
        }
    };
    if r.status == 200 {
        let mut m = ctx.m();
        m.families[f].access[t].1 = Tok::Revoked;
        m.stats.revoked_access += 1;
    } else {
        ctx.violation(format!("/revoke answered {}", r.brief()));
    }
    Ok(())
}

/// Whether access token `t` of family `f` must be accepted (`Some(true)`), refused
/// (`Some(false)`), or is unknown to the model (`None`).
pub(super) fn expected_access(v: &FamView, t: usize) -> Option<bool> {
    if v.agent_state == AgentState::RevokeLost {
        return None;
    }
    match (v.state, v.access[t].1) {
        (Fam::Revoked(_), _) => Some(false),
        (Fam::Live | Fam::RefreshLost, Tok::Live) => Some(true),
        (Fam::Live | Fam::RefreshLost, Tok::Revoked) => Some(false),
        _ => None,
    }
}

/// Calls `/mcp` with access token `t` of family `f` and compares with the model.
pub(super) async fn op_mcp(ctx: &Ctx, f: usize, t: usize, when: &str) -> Out<()> {
    let v = ctx.m().view(f);
    let Some(accept) = expected_access(&v, t) else {
        return Ok(());
    };
    let status = ctx.mcp(&v.access[t].0).await?;
    ctx.checked();
    match (accept, status) {
        (true, 200) | (false, 401) => {}
        (true, s) => ctx.violation(format!(
            "client {}: an access token confirmed issued (not revoked) was not accepted at /mcp {when}: {s} (200 = accepted)",
            v.client_id
        )),
        (false, s) => {
            let why = match v.state {
                Fam::Revoked(why) => why,
                _ => "the access token itself was revoked at /revoke",
            };
            ctx.violation(format!(
                "client {}: an access token was honoured at /mcp ({s}) {when} after its revocation was confirmed ({why})",
                v.client_id
            ));
        }
    }
    Ok(())
}

/// The account page: revoke this agent's client (consent and every token).
pub(super) async fn op_account_revoke(ctx: &Ctx, a: usize, rng: &mut Rng) -> Out<()> {
    let (client_id, redirect_uri, jar, state, consent) = {
        let m = ctx.m();
        let ag = &m.agents[a];
        let c = &m.clients[ag.client];
        (
            c.id.clone(),
            c.redirect_uri.clone(),
            ag.jar.clone(),
            ag.state,
            ag.consent,
        )
    };
    // A code issued just before the revocation, to redeem after it.
    let mut early_code = None;
    if state == AgentState::Active && consent == Consent::Confirmed {
        let pkce = Pkce::new();
        let st = format!("pre{:x}", rng.next());
        let r = ctx
            .navigate(
                &ctx.authorize_url(&client_id, &redirect_uri, &pkce, &st),
                Some(&jar),
                "none",
            )
            .await?;
        early_code = ctx
            .code_in(r.location().as_deref(), &redirect_uri, &st)
            .map(|c| (c, pkce.verifier));
    }
    let page = ctx
        .navigate(&ctx.url("/account"), Some(&jar), "none")
        .await?;
    let Some(csrf) = (page.status == 200).then(|| page.hidden("csrf")).flatten() else {
        if consent == Consent::Confirmed {
            ctx.violation(format!(
                "client {client_id}: the account page did not show for a sign-in confirmed with the consent: {}",
                page.brief()
            ));
        }
        return Ok(());
    };
    let r = match ctx
        .post_form(
            &ctx.url("/account/revoke"),
            &[("client_id", &client_id), ("csrf", &csrf)],
            Some(&jar),
            &ctx.base,
        )
        .await
    {
        Ok(r) => r,
        Err(Fail::NotSent) => return Err(Fail::NotSent),
        Err(e) => {
            ctx.m().agents[a].state = AgentState::RevokeLost;
            return Err(e);
        }
    };
    if r.status != 303 {
        ctx.violation(format!(
            "client {client_id}: the account page's revoke answered {}",
            r.brief()
        ));
        return Ok(());
    }
    let mut m = ctx.m();
    m.stats.revoked_account += 1;
    let fams = m.agents[a].families.clone();
    let ag = &mut m.agents[a];
    ag.state = AgentState::Retired;
    ag.consent = Consent::Revoked;
    ag.code_before_revoke = early_code;
    for f in fams {
        if m.families[f].state != Fam::Dead {
            m.families[f].state = Fam::Revoked("client access revoked on the account page");
        }
    }
    Ok(())
}
