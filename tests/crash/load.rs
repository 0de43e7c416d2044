//! The load: each worker's next operation, and the worker loop.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::{sleep, timeout};

use super::Rng;
use super::ctx::{Ctx, Fail};
use super::model::{AgentState, Consent, Fam, Model, Tok};
use super::ops::{
    op_account_revoke, op_flow, op_mcp, op_present, op_redeem, op_register, op_revoke,
    op_revoke_access,
};

pub(super) enum Op {
    Register,
    Flow(usize),
    Redeem(usize),
    Present(usize, usize),
    Revoke(usize),
    RevokeAccess(usize, usize),
    Mcp(usize, usize),
    AccountRevoke(usize),
}

/// The worker's next operation: first whatever was left unconfirmed, then a random one.
pub(super) fn choose(m: &Model, w: usize, rng: &mut Rng) -> Op {
    let mine: Vec<usize> = (0..m.agents.len())
        .filter(|&a| m.agents[a].worker == w)
        .collect();
    for &a in &mine {
        let ag = &m.agents[a];
        if ag.state == AgentState::RevokeLost {
            return Op::AccountRevoke(a);
        }
        if ag.pending_code.is_some() {
            return Op::Redeem(a);
        }
        for &f in &ag.families {
            let fam = &m.families[f];
            match fam.state {
                Fam::RefreshLost => return Op::Present(f, fam.chain.len() - 1),
                Fam::ReuseLost(i) => return Op::Present(f, i),
                Fam::RevokeLost => return Op::Revoke(f),
                _ => {}
            }
            if let Some(t) = fam.access.iter().position(|(_, s)| *s == Tok::RevokeLost) {
                return Op::RevokeAccess(f, t);
            }
        }
    }
    let active: Vec<usize> = mine
        .iter()
        .copied()
        .filter(|&a| m.agents[a].state == AgentState::Active)
        .collect();
    if active.is_empty() || (active.len() < 3 && rng.chance(0.08)) {
        return Op::Register;
    }
    let a = rng.pick(&active);
    let ag = &m.agents[a];
    if ag.consent != Consent::Confirmed {
        return Op::Flow(a);
    }
    let live: Vec<usize> = ag
        .families
        .iter()
        .copied()
        .filter(|&f| m.families[f].state == Fam::Live)
        .collect();
    if live.is_empty() {
        return Op::Flow(a);
    }
    let f = rng.pick(&live);
    let fam = &m.families[f];
    let last = fam.chain.len() - 1;
    match rng.below(100) {
        0..30 => Op::Flow(a),
        30..58 => Op::Present(f, last),
        58..74 => {
            // Any family of this agent: live tokens must work, revoked ones must not.
            let g = rng.pick(&ag.families);
            Op::Mcp(g, rng.below(m.families[g].access.len()))
        }
        74..81 => Op::Revoke(f),
        81..86 => {
            let live_tokens: Vec<usize> = (0..fam.access.len())
                .filter(|&t| fam.access[t].1 == Tok::Live)
                .collect();
            if live_tokens.is_empty() {
                Op::Present(f, last)
            } else {
                Op::RevokeAccess(f, rng.pick(&live_tokens))
            }
        }
        86..92 if last >= 1 => {
            let idx = if rng.chance(0.5) {
                last - 1
            } else {
                rng.below(last)
            };
            Op::Present(f, idx)
        }
        92..95 => Op::AccountRevoke(a),
        _ => Op::Present(f, last),
    }
}

pub(super) async fn worker(ctx: Arc<Ctx>, w: usize, seed: u64) {
    let mut rng = Rng(seed);
    while !ctx.stop.load(Ordering::SeqCst) {
        let result = {
            let _load = ctx.gate.read().await;
            if ctx.stop.load(Ordering::SeqCst) {
                break;
            }
            let op = choose(&ctx.m(), w, &mut rng);
            let step = async {
                match op {
                    Op::Register => op_register(&ctx, w, &mut rng).await,
                    Op::Flow(a) => op_flow(&ctx, a, &mut rng).await,
                    Op::Redeem(a) => op_redeem(&ctx, a).await,
                    Op::Present(f, i) => op_present(&ctx, f, i).await,
                    Op::Revoke(f) => op_revoke(&ctx, f).await,
                    Op::RevokeAccess(f, t) => op_revoke_access(&ctx, f, t).await,
                    Op::Mcp(f, t) => op_mcp(&ctx, f, t, "during load").await,
                    Op::AccountRevoke(a) => op_account_revoke(&ctx, a, &mut rng).await,
                }
            };
            timeout(Duration::from_secs(30), step)
                .await
                .unwrap_or_else(|_| Err(Fail::Lost("step timed out".to_owned())))
        };
        match result {
            Ok(()) => {}
            Err(Fail::NotSent) => sleep(Duration::from_millis(20)).await,
            Err(Fail::Lost(why)) => {
                *ctx.m().lost_reasons.entry(why).or_default() += 1;
                sleep(Duration::from_millis(5)).await;
            }
        }
    }
}
