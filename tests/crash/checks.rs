//! The checks after a restart, and the final replays.

use futures_util::StreamExt;

use crate::support::Pkce;

use super::ctx::{Answer, Ctx};
use super::model::{AgentState, Consent, Fam, Tok};
use super::ops::{op_mcp, op_present};
use super::{Rng, UPSTREAM_LOSS_BOUND};

pub(super) async fn check_client(ctx: &Ctx, c: usize) {
    if ctx.is_hung() {
        return;
    }
    let (id, redirect_uri) = {
        let mut m = ctx.m();
        m.clients[c].checks += 1;
        (m.clients[c].id.clone(), m.clients[c].redirect_uri.clone())
    };
    let url = ctx.authorize_url(&id, &redirect_uri, &Pkce::new(), "check");
    let Ok(r) = ctx.navigate(&url, None, "none").await else {
        return;
    };
    ctx.checked();
    if r.status != 200 || r.hidden("txn").is_none() {
        ctx.violation(format!(
            "client {id}, confirmed registered (201), is not known after a restart: /authorize answered {}",
            r.brief()
        ));
    }
}

pub(super) async fn check_agent(ctx: &Ctx, a: usize) {
    if ctx.is_hung() {
        return;
    }
    let (client_id, redirect_uri, jar, state, consent, early) = {
        let mut m = ctx.m();
        let ag = &mut m.agents[a];
        ag.checks += 1;
        let early = ag.code_before_revoke.take();
        let (state, consent, jar, client) = (ag.state, ag.consent, ag.jar.clone(), ag.client);
        let c = &m.clients[client];
        (
            c.id.clone(),
            c.redirect_uri.clone(),
            jar,
            state,
            consent,
            early,
        )
    };
    let check_consent = matches!(
        (state, consent),
        (AgentState::Active, Consent::Confirmed) | (AgentState::Retired, Consent::Revoked)
    );
    if check_consent {
        let pkce = Pkce::new();
        let url = ctx.authorize_url(&client_id, &redirect_uri, &pkce, "check");
        if let Ok(r) = ctx.navigate(&url, Some(&jar), "none").await {
            ctx.checked();
            let code = ctx.code_in(r.location().as_deref(), &redirect_uri, "check");
            let page = r.status == 200 && r.hidden("txn").is_some();
            match consent {
                Consent::Confirmed if r.status == 303 && code.is_some() => {}
                Consent::Confirmed => ctx.violation(format!(
                    "client {client_id}: a consent confirmed to it (redirect with a code) is not remembered after a restart: /authorize answered {}",
                    r.brief()
                )),
                _ if page => {}
                _ => ctx.violation(format!(
                    "client {client_id}: a consent revoked on the account page (303) is honoured after a restart: /authorize answered {} {:?}",
                    r.brief(),
                    r.location()
                )),
            }
        }
    }
    if let Some((code, verifier)) = early
        && let Ok(r) = ctx
            .redeem(&client_id, &redirect_uri, &code, &verifier)
            .await
    {
        ctx.checked();
        if !r.is_invalid_grant() {
            ctx.violation(format!(
                "client {client_id}: a code issued before its consent was revoked was not refused with invalid_grant after the revocation: {}",
                r.brief()
            ));
        }
    }
}

/// A family's tokens against the model; a live family also rotates once.
pub(super) async fn check_family(ctx: &Ctx, f: usize, full: bool, seed: u64) {
    if ctx.is_hung() {
        return;
    }
    let mut rng = Rng(seed);
    let v = {
        let mut m = ctx.m();
        m.families[f].checks += 1;
        m.view(f)
    };
    if v.agent_state == AgentState::RevokeLost {
        return;
    }
    let n = v.access.len();
    let mut tokens: Vec<usize> = if full {
        (0..n).collect()
    } else {
        let mut t = vec![n - 1];
        for _ in 0..2 {
            t.push(rng.below(n));
        }
        t.sort_unstable();
        t.dedup();
        t
    };
    // Individually revoked tokens are always worth a look.
    tokens.extend((0..n).filter(|&t| v.access[t].1 == Tok::Revoked));
    tokens.sort_unstable();
    tokens.dedup();
    for t in tokens {
        if op_mcp(ctx, f, t, "after a restart").await.is_err() {
            return;
        }
    }
    match v.state {
        Fam::Live => {
            let _ = op_present(ctx, f, v.chain.len() - 1).await;
        }
        Fam::Revoked(why) => {
            let last = v.chain.len() - 1;
            if let Ok(r) = ctx.refresh(&v.client_id, &v.chain[last]).await {
                ctx.checked();
                if !r.is_invalid_grant() {
                    ctx.m().families[f].state = Fam::Dead;
                    ctx.violation(format!(
                        "client {}: a refresh token of a family confirmed revoked ({why}) was honoured after a restart: {}",
                        v.client_id,
                        r.brief()
                    ));
                    return;
                }
            }
            if (full || rng.chance(0.3))
                && let Ok(r) = ctx
                    .redeem(&v.client_id, &v.redirect_uri, &v.code, &v.verifier)
                    .await
            {
                ctx.checked();
                if !r.is_invalid_grant() {
                    ctx.violation(format!(
                        "client {}: a code confirmed redeemed, presented again after a restart, was not refused with invalid_grant: {}",
                        v.client_id,
                        r.brief()
                    ));
                }
            }
        }
        _ => {}
    }
}

/// Presents a live family's code again: it must be refused, and that revokes the family.
pub(super) async fn replay_code(ctx: &Ctx, f: usize) {
    if ctx.is_hung() {
        return;
    }
    let v = ctx.m().view(f);
    let Ok(r) = ctx
        .redeem(&v.client_id, &v.redirect_uri, &v.code, &v.verifier)
        .await
    else {
        ctx.m().families[f].state = Fam::Dead;
        return;
    };
    let mut m = ctx.m();
    m.stats.checks += 1;
    if r.is_invalid_grant() {
        m.stats.codes_replayed += 1;
        if matches!(v.state, Fam::Live | Fam::RefreshLost) {
            m.families[f].state = Fam::Revoked("its authorization code was presented again");
        }
    } else {
        m.families[f].state = Fam::Dead;
        drop(m);
        ctx.violation(format!(
            "client {}: a code confirmed redeemed, presented again, was not refused with invalid_grant: {}",
            v.client_id,
            r.brief()
        ));
    }
}

/// The items least checked so far, at most `cap` (all when `cap` is `None`).
pub(super) fn least_checked(
    items: Vec<(usize, u32)>,
    cap: Option<usize>,
    rng: &mut Rng,
) -> Vec<usize> {
    let mut keyed: Vec<(u32, u64, usize)> =
        items.into_iter().map(|(i, c)| (c, rng.next(), i)).collect();
    keyed.sort_unstable();
    keyed
        .into_iter()
        .take(cap.unwrap_or(usize::MAX))
        .map(|(_, _, i)| i)
        .collect()
}

/// One pass of checks (the load is paused). `full`: everything; else a sample favouring
/// what has not been checked yet, plus a few families destroyed on purpose (code replay,
/// reuse of a rotated-away refresh token).
pub(super) async fn check_pass(ctx: &Ctx, full: bool, rng: &mut Rng) -> u64 {
    let before = ctx.m().stats.checks;
    let cap = |n: usize| (!full).then_some(n);
    let (clients, agents, families, destroy_code, destroy_reuse) = {
        let m = ctx.m();
        let clients = least_checked(
            m.clients
                .iter()
                .enumerate()
                .map(|(i, c)| (i, c.checks))
                .collect(),
            cap(60),
            rng,
        );
        let agents = least_checked(
            m.agents
                .iter()
                .enumerate()
                .filter(|(_, a)| {
                    a.code_before_revoke.is_some() || a.state != AgentState::RevokeLost
                })
                .map(|(i, a)| {
                    (
                        i,
                        if a.code_before_revoke.is_some() {
                            0
                        } else {
                            a.checks
                        },
                    )
                })
                .collect(),
            cap(60),
            rng,
        );
        let live: Vec<(usize, u32)> = m
            .families
            .iter()
            .enumerate()
            .filter(|(_, f)| matches!(f.state, Fam::Live | Fam::RefreshLost))
            .map(|(i, f)| (i, f.checks))
            .collect();
        let revoked: Vec<(usize, u32)> = m
            .families
            .iter()
            .enumerate()
            .filter(|(_, f)| matches!(f.state, Fam::Revoked(_)))
            .map(|(i, f)| (i, f.checks))
            .collect();
        let mut families = least_checked(live, cap(150), rng);
        families.extend(least_checked(revoked, cap(100), rng));
        // Families already checked at least once may be destroyed on purpose.
        let mut spare: Vec<usize> = m
            .families
            .iter()
            .enumerate()
            .filter(|(i, f)| f.state == Fam::Live && f.checks > 0 && !families.contains(i))
            .map(|(i, _)| i)
            .collect();
        let mut destroy_code = Vec::new();
        let mut destroy_reuse = Vec::new();
        if !full {
            for _ in 0..3 {
                if !spare.is_empty() {
                    destroy_code.push(spare.swap_remove(rng.below(spare.len())));
                }
            }
            for _ in 0..2 {
                if !spare.is_empty() {
                    let f = spare.swap_remove(rng.below(spare.len()));
                    let last = m.families[f].chain.len() - 1;
                    if last >= 1 {
                        destroy_reuse.push((f, rng.below(last)));
                    }
                }
            }
        }
        (clients, agents, families, destroy_code, destroy_reuse)
    };
    futures_util::stream::iter(clients)
        .for_each_concurrent(ctx.concurrency, |c| check_client(ctx, c))
        .await;
    futures_util::stream::iter(agents)
        .for_each_concurrent(ctx.concurrency, |a| check_agent(ctx, a))
        .await;
    let seeds: Vec<(usize, u64)> = families.into_iter().map(|f| (f, rng.next())).collect();
    futures_util::stream::iter(seeds)
        .for_each_concurrent(ctx.concurrency, |(f, s)| check_family(ctx, f, full, s))
        .await;
    for f in destroy_code {
        replay_code(ctx, f).await;
    }
    for (f, idx) in destroy_reuse {
        if ctx.is_hung() {
            break;
        }
        let _ = op_present(ctx, f, idx).await;
    }
    ctx.m().stats.checks - before
}

/// At the very end: every rotated-away refresh token and every redeemed code is presented
/// once more; each must be refused (the previous token may only replay its successor).
pub(super) async fn final_replays(ctx: &Ctx) -> u64 {
    let before = ctx.m().stats.checks;
    let n = ctx.m().families.len();
    futures_util::stream::iter(0..n)
        .for_each_concurrent(ctx.concurrency, |f| async move {
            if ctx.is_hung() {
                return;
            }
            let v = ctx.m().view(f);
            let last = v.chain.len() - 1;
            // The oldest, one in between and the previous one (reuse detection remembers 64).
            let mut older: Vec<usize> = vec![last.saturating_sub(64), last / 2, last.saturating_sub(1)];
            older.retain(|&i| i < last);
            older.sort_unstable();
            older.dedup();
            for idx in older {
                let Ok(r) = ctx.refresh(&v.client_id, &v.chain[idx]).await else {
                    continue;
                };
                ctx.checked();
                let replayed = r.status == 200
                    && idx + 1 == last
                    && r.json()["refresh_token"].as_str() == Some(v.chain[last].as_str());
                if replayed {
                    ctx.m().stats.replays += 1;
                } else if !r.is_invalid_grant() {
                    ctx.violation(format!(
                        "client {}: a refresh token rotated away (generation {idx}, current {last}), presented again at the end, was not refused with invalid_grant: {}",
                        v.client_id,
                        r.brief()
                    ));
                }
            }
            if let Ok(r) = ctx
                .redeem(&v.client_id, &v.redirect_uri, &v.code, &v.verifier)
                .await
            {
                ctx.checked();
                if r.is_invalid_grant() {
                    ctx.m().stats.codes_replayed += 1;
                } else {
                    ctx.violation(format!(
                        "client {}: a code confirmed redeemed, presented again at the end, was not refused with invalid_grant: {}",
                        v.client_id,
                        r.brief()
                    ));
                }
            }
        })
        .await;
    ctx.m().stats.checks - before
}

/// After the kill at `killed` (the process reaped then): every `tools/call` sent before that
/// kill — so served by the process it killed — and answered more than [`UPSTREAM_LOSS_BOUND`]
/// before it owes its `upstream_action` event to the trail. Those answered closer to the kill
/// (or read from the socket after it) may be lost with the last group commit window (issue
/// 17's decision). Each call is judged once, at the first kill after it was sent; with `look`,
/// the trail is read and every owed call so far is looked for in it.
pub(super) async fn check_upstream_actions(ctx: &Ctx, killed: tokio::time::Instant, look: bool) {
    let owed: Vec<(super::model::Call, std::time::Duration)> = {
        let mut m = ctx.m();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut m.calls)
            .into_iter()
            .partition(|c| c.sent < killed);
        m.calls = later;
        for c in due {
            let age = killed.saturating_duration_since(c.answered);
            if age > UPSTREAM_LOSS_BOUND {
                m.stats.upstream_checked += 1;
                m.owed.push((c, age));
            } else {
                m.stats.upstream_exempt += 1;
            }
        }
        if !look || m.owed.is_empty() {
            return;
        }
        std::mem::take(&mut m.owed)
    };
    // The newest events first (most owed calls are recent); the whole trail only if one is
    // not among them.
    let mut tools = ctx.upstream_tools(true).await;
    if tools
        .as_ref()
        .is_ok_and(|t| owed.iter().any(|(c, _)| !t.contains(&c.tool)))
    {
        tools = ctx.upstream_tools(false).await;
    }
    match tools {
        Ok(tools) => {
            for (c, age) in owed {
                ctx.checked();
                if !tools.contains(&c.tool) {
                    ctx.violation(format!(
                        "the tools/call {} was answered {} ms before a kill, more than the {} ms the upstream-action commit window (plus margin) allows, and its upstream_action event is not in the trail after the restart",
                        c.tool,
                        age.as_millis(),
                        UPSTREAM_LOSS_BOUND.as_millis()
                    ));
                }
            }
        }
        Err(why) => ctx.violation(format!(
            "the audit trail could not be read through the admin API after a restart: {why}"
        )),
    }
}
