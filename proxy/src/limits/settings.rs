//! `[rate_limits]`: how fast anyone may call each public endpoint, with the section's
//! validation.
//!
//! Rate-limit defaults are deliberately generous. An AI platform (claude.ai, ChatGPT, a
//! hosted agent runner) reaches the proxy from a handful of shared egress IPs for all of its
//! users, and it re-registers on every reconnect; per-IP buckets sized for one person lock the
//! whole platform out (peers-and-user-asks.md item 14). The per-IP bucket therefore only stops a
//! single runaway or hostile source, and the global ceiling bounds total store growth and load.

use serde::Deserialize;

/// `[rate_limits]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimits {
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default)]
    register: RawRateLimit,
    #[serde(default)]
    token: RawRateLimit,
    #[serde(default)]
    revoke: RawRateLimit,
    #[serde(default)]
    authorize: RawRateLimit,
    #[serde(default)]
    callback: RawRateLimit,
    #[serde(default)]
    consent: RawRateLimit,
    #[serde(default)]
    connect: RawRateLimit,
    #[serde(default)]
    account: RawRateLimit,
}

fn yes() -> bool {
    true
}

impl Default for RawRateLimits {
    fn default() -> Self {
        RawRateLimits {
            enabled: true,
            register: RawRateLimit::default(),
            token: RawRateLimit::default(),
            revoke: RawRateLimit::default(),
            authorize: RawRateLimit::default(),
            callback: RawRateLimit::default(),
            consent: RawRateLimit::default(),
            connect: RawRateLimit::default(),
            account: RawRateLimit::default(),
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    per_ip_per_minute: Option<u32>,
    per_ip_burst: Option<u32>,
    global_per_minute: Option<u32>,
    global_burst: Option<u32>,
}

/// One endpoint's limits: a token bucket per client IP and one for everyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Sustained requests per minute from one client IP (IPv6: one /64).
    pub per_ip_per_minute: u32,
    /// Requests one client IP may send at once before the sustained rate applies.
    pub per_ip_burst: u32,
    /// Sustained requests per minute from everyone together.
    pub global_per_minute: u32,
    /// Burst for everyone together.
    pub global_burst: u32,
}

impl RateLimit {
    /// `/register`: 5/s sustained per IP with a burst of 100 (a platform's reconnect storm;
    /// an IPv6 /48 gets four times that), 100/s and 5000 overall. The global bucket is 20
    /// addresses' sustained rate and 50 addresses' bursts, so a handful of addresses cannot
    /// shut registration for everyone, while a flood still adds at most 360 000 unused
    /// registrations an hour (each reaped after `unused_client_ttl_secs`, or after the
    /// authorization window beyond the dedupe bound).
    pub const REGISTER: RateLimit = RateLimit {
        per_ip_per_minute: 300,
        per_ip_burst: 100,
        global_per_minute: 6000,
        global_burst: 5000,
    };
    /// `/token`: 100/s sustained per IP with a burst of 1000 (a platform refreshing for all its
    /// users from one egress IP), 2000/s and 5000 overall.
    pub const TOKEN: RateLimit = RateLimit {
        per_ip_per_minute: 6000,
        per_ip_burst: 1000,
        global_per_minute: 120_000,
        global_burst: 5000,
    };
    /// `/revoke` (also a client-secret oracle): 20/s sustained per IP with a burst of 200 (a
    /// platform revoking for its users from one egress IP), 200/s and 2000 overall. A guess
    /// at a client secret (256 random bits) is hopeless at any rate; the limit bounds the
    /// work.
    pub const REVOKE: RateLimit = RateLimit {
        per_ip_per_minute: 1200,
        per_ip_burst: 200,
        global_per_minute: 12_000,
        global_burst: 2000,
    };
    /// `/authorize`: browsers, but many behind one NAT (an office, a carrier-grade NAT, a
    /// platform's hosted browser): 10/s sustained per IP with a burst of 100, 500/s and 5000
    /// overall. A valid request stores a transaction, so the global bucket bounds that.
    pub const AUTHORIZE: RateLimit = RateLimit {
        per_ip_per_minute: 600,
        per_ip_burst: 100,
        global_per_minute: 30_000,
        global_burst: 5000,
    };
    /// `/callback/github`: one per sign-in, so as `/authorize`.
    pub const CALLBACK: RateLimit = RateLimit::AUTHORIZE;
    /// `/consent`: one form post per consent page, 5/s per IP with a burst of 60, 250/s and
    /// 3000 overall.
    pub const CONSENT: RateLimit = RateLimit {
        per_ip_per_minute: 300,
        per_ip_burst: 60,
        global_per_minute: 15_000,
        global_burst: 3000,
    };
    /// `/connect/{code}`: opened from links agents hand out, as `/consent`.
    pub const CONNECT: RateLimit = RateLimit::CONSENT;
    /// `POST /account/...`: a person's own clicks, 2/s per IP with a burst of 30, 100/s and
    /// 1000 overall.
    pub const ACCOUNT: RateLimit = RateLimit {
        per_ip_per_minute: 120,
        per_ip_burst: 30,
        global_per_minute: 6000,
        global_burst: 1000,
    };
}

/// Rate limits on the public endpoints (`/mcp` authenticates first and answers a stranger
/// without storing anything; the metadata documents are static).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimits {
    /// Off only for benchmarks of the store.
    pub enabled: bool,
    /// `POST /register`.
    pub register: RateLimit,
    /// `POST /token`.
    pub token: RateLimit,
    /// `POST /revoke`.
    pub revoke: RateLimit,
    /// `GET /authorize`.
    pub authorize: RateLimit,
    /// `GET /callback/github`.
    pub callback: RateLimit,
    /// `POST /consent`.
    pub consent: RateLimit,
    /// `GET` and `POST /connect/{code}`.
    pub connect: RateLimit,
    /// `POST /account/...` (revoke, sign-out, disconnect, withdraw).
    pub account: RateLimit,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            enabled: true,
            register: RateLimit::REGISTER,
            token: RateLimit::TOKEN,
            revoke: RateLimit::REVOKE,
            authorize: RateLimit::AUTHORIZE,
            callback: RateLimit::CALLBACK,
            consent: RateLimit::CONSENT,
            connect: RateLimit::CONNECT,
            account: RateLimit::ACCOUNT,
        }
    }
}

fn one_limit(
    name: &str,
    raw: &RawRateLimit,
    default: RateLimit,
    errs: &mut Vec<String>,
) -> RateLimit {
    let l = RateLimit {
        per_ip_per_minute: raw.per_ip_per_minute.unwrap_or(default.per_ip_per_minute),
        per_ip_burst: raw.per_ip_burst.unwrap_or(default.per_ip_burst),
        global_per_minute: raw.global_per_minute.unwrap_or(default.global_per_minute),
        global_burst: raw.global_burst.unwrap_or(default.global_burst),
    };
    for (field, v) in [
        ("per_ip_per_minute", l.per_ip_per_minute),
        ("per_ip_burst", l.per_ip_burst),
        ("global_per_minute", l.global_per_minute),
        ("global_burst", l.global_burst),
    ] {
        if v == 0 {
            errs.push(format!(
                "rate_limits.{name}.{field}: at least 1 (set rate_limits.enabled = false to switch limits off)"
            ));
        }
    }
    if l.global_per_minute < l.per_ip_per_minute || l.global_burst < l.per_ip_burst {
        errs.push(format!(
            "rate_limits.{name}: the global rate and burst must be at least the per-IP ones"
        ));
    }
    l
}

/// Validates `[rate_limits]`, pushing one readable line per problem into `errs`.
pub fn rate_limits(raw: &RawRateLimits, errs: &mut Vec<String>) -> RateLimits {
    RateLimits {
        enabled: raw.enabled,
        register: one_limit("register", &raw.register, RateLimit::REGISTER, errs),
        token: one_limit("token", &raw.token, RateLimit::TOKEN, errs),
        revoke: one_limit("revoke", &raw.revoke, RateLimit::REVOKE, errs),
        authorize: one_limit("authorize", &raw.authorize, RateLimit::AUTHORIZE, errs),
        callback: one_limit("callback", &raw.callback, RateLimit::CALLBACK, errs),
        consent: one_limit("consent", &raw.consent, RateLimit::CONSENT, errs),
        connect: one_limit("connect", &raw.connect, RateLimit::CONNECT, errs),
        account: one_limit("account", &raw.account, RateLimit::ACCOUNT, errs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_default_generous_and_global_at_least_per_ip() {
        let mut errs = Vec::new();
        let l = rate_limits(&toml::from_str("").unwrap(), &mut errs);
        assert!(errs.is_empty());
        assert_eq!(l, RateLimits::default());
        let raw: RawRateLimits =
            toml::from_str("[register]\nper_ip_burst = 10\nglobal_burst = 5").unwrap();
        rate_limits(&raw, &mut errs);
        assert!(
            errs.iter().any(|e| e.contains("at least the per-IP")),
            "{errs:?}"
        );
        let raw: RawRateLimits = toml::from_str("[token]\nper_ip_per_minute = 0").unwrap();
        let mut errs = Vec::new();
        rate_limits(&raw, &mut errs);
        assert!(errs.iter().any(|e| e.contains("at least 1")), "{errs:?}");
        // Every public endpoint has a section of its own.
        let raw: RawRateLimits = toml::from_str(
            "[revoke]\nper_ip_burst = 7\n[authorize]\nper_ip_burst = 8\n[callback]\nper_ip_burst = 9\n[consent]\nper_ip_burst = 10\n[connect]\nper_ip_burst = 11\n[account]\nper_ip_burst = 12",
        )
        .unwrap();
        let mut errs = Vec::new();
        let l = rate_limits(&raw, &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            [
                l.revoke,
                l.authorize,
                l.callback,
                l.consent,
                l.connect,
                l.account
            ]
            .map(|l| l.per_ip_burst),
            [7, 8, 9, 10, 11, 12]
        );
        assert_eq!(
            l.account.per_ip_per_minute,
            RateLimit::ACCOUNT.per_ip_per_minute
        );
    }
}
