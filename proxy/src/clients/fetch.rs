//! Binding: a Client ID Metadata Document URL ↔ the address actually fetched (SSRF defence,
//! CIMD -01 §6 and MCP security best practices §SSRF). The host is resolved here, every
//! resolved address must pass [`address_allowed`], and the HTTP client is pinned to exactly
//! those addresses (no second resolution, so DNS rebinding between check and use cannot
//! redirect the connection). No redirects, only 200, short timeouts, at most
//! [`MAX_BODY_BYTES`], an outbound budget per source (one IPv4 address, or one IPv6 /48:
//! a single allocation holds 2^16 /64s, so a per-/64 count would let one site spend everyone's
//! budget), taken before the name is resolved, and a global one (taken only once the address
//! check passed, so ids that are refused anyway cannot spend everyone's budget). URLs that
//! fetched cleanly before ("known") have a separate reserve on top, at most one fetch per URL
//! per minute, so a flood of new URL ids from many sources cannot starve the clients people
//! already use.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use url::{Host, Url};

use crate::clock::UnixTime;
use crate::outbound;

/// The largest document read (CIMD -01 §6.6 recommends 5 KB).
pub const MAX_BODY_BYTES: usize = 5 * 1024;

/// Resolves host names to addresses. The system resolver in production; tests inject one.
#[async_trait]
pub trait Resolver: Send + Sync + 'static {
    /// All addresses for `host`, with `port` filled in.
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The operating system's resolver, through tokio.
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// Why a fetch did not produce a document. None of these is ever cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The host is, or resolves to, a special-use address; nothing was connected to.
    #[error("special-use address")]
    SpecialUseAddress,
    /// The host name did not resolve.
    #[error("host did not resolve")]
    Unresolvable,
    /// Too many outbound fetches this minute (from this client IP, or all together).
    #[error("rate limited")]
    RateLimited,
    /// Connection failed or timed out.
    #[error("unreachable")]
    Unreachable,
    /// The server answered with a redirect (never followed).
    #[error("redirect")]
    Redirect,
    /// The server answered with a status other than 200.
    #[error("status {0}")]
    Status(u16),
    /// The body exceeded [`MAX_BODY_BYTES`] (or the key-set limit).
    #[error("too large")]
    TooLarge,
}

impl FetchError {
    /// Whether the failure is not the client's: the budget, the network, the publisher's
    /// server. Retrying later may succeed, and the last valid document may stand in.
    pub fn is_temporary(self) -> bool {
        match self {
            FetchError::RateLimited | FetchError::Unreachable => true,
            FetchError::Status(s) => s >= 500,
            _ => false,
        }
    }

    /// A readable reason, for the page and the `error_description`.
    pub fn description(self) -> &'static str {
        match self {
            FetchError::SpecialUseAddress => {
                "the client_id URL points to a private or special-use network address"
            }
            FetchError::Unresolvable => "the client_id URL's host name does not resolve",
            FetchError::RateLimited => {
                "too many client metadata documents were fetched just now; try again in a minute"
            }
            FetchError::Unreachable => {
                "the client metadata document could not be fetched (connection failed or timed out)"
            }
            FetchError::Redirect => {
                "the client metadata document URL answered with a redirect, which is not followed"
            }
            FetchError::Status(_) => "the client metadata document URL did not answer 200 OK",
            FetchError::TooLarge => "the client metadata document is larger than 5 KB",
        }
    }
}

/// What a successful fetch returned: a body that came from a public address (loopback only
/// with the development setting) within the budgets, without redirects, 200, at most
/// [`MAX_BODY_BYTES`]. Only [`Fetcher::fetch`] makes one.
///
/// ```compile_fail
/// use mcp_oauth_proxy::clients::fetch::Fetched;
/// // Private fields: a document cannot be passed off as fetched outside the fetcher.
/// let forged = Fetched { body: b"{}".to_vec(), cache_control: None };
/// ```
///
/// ```
/// use mcp_oauth_proxy::clients::fetch::Fetched;
/// fn read(f: &Fetched) -> (&[u8], Option<&str>) {
///     (f.body(), f.cache_control())
/// }
/// ```
#[derive(Debug)]
pub struct Fetched {
    body: Vec<u8>,
    cache_control: Option<String>,
}

impl Fetched {
    /// The body (at most [`MAX_BODY_BYTES`]).
    pub fn body(&self) -> &[u8] {
        &self.body
    }
    /// The `Cache-Control` header, if any.
    pub fn cache_control(&self) -> Option<&str> {
        self.cache_control.as_deref()
    }
}

/// Fetch settings.
#[derive(Debug, Clone, Copy)]
pub struct FetchPolicy {
    /// Connect and whole-request timeout.
    pub timeout: Duration,
    /// Fetches allowed per minute (all hosts together).
    pub per_minute: u32,
    /// Fetch attempts allowed per minute from one source (an IPv4 address, an IPv6 /48).
    pub per_ip_per_minute: u32,
    /// Fetches per minute reserved for URLs that fetched cleanly before, used when the
    /// general budget (or the source's own) is spent; at most one per URL per minute.
    pub known_per_minute: u32,
    /// Development only: loopback addresses (and plain http to them) are allowed.
    pub allow_loopback: bool,
}

/// The SSRF-safe fetcher.
pub struct Fetcher {
    resolver: Arc<dyn Resolver>,
    policy: FetchPolicy,
    window: Mutex<(u64, u32)>,
    per_ip: Mutex<(u64, HashMap<IpAddr, u32>)>,
    /// This minute's reserve: the minute and the URLs that used it (its size is the count).
    reserve: Mutex<(u64, HashSet<String>)>,
}

/// Whether the URL being fetched produced a valid document before (its stored record says
/// so). Only the directory knows; the reserve is for these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Familiarity {
    /// Never fetched cleanly (or its record expired).
    New,
    /// Fetched and validated before.
    Known,
}

/// The per-source bucket: an IPv4 address (IPv4-mapped IPv6 counts as IPv4), or the /48 of
/// an IPv6 address (the `limits` /48 key; a site gets a /48, so one site is one source).
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 80) - 1)).into()),
        v4 => v4,
    }
}

/// Most client IPs counted in one minute; beyond it new addresses are refused like an
/// exhausted budget (memory stays bounded under a flood of addresses).
const MAX_TRACKED_IPS: usize = 10_000;

impl Fetcher {
    /// A fetcher resolving through `resolver`.
    pub fn new(resolver: Arc<dyn Resolver>, policy: FetchPolicy) -> Fetcher {
        Fetcher {
            resolver,
            policy,
            window: Mutex::new((0, 0)),
            per_ip: Mutex::new((0, HashMap::new())),
            reserve: Mutex::new((0, HashSet::new())),
        }
    }

    /// Whether loopback is allowed (the development setting).
    pub fn allows_loopback(&self) -> bool {
        self.policy.allow_loopback
    }

    fn take_token(&self, now: UnixTime) -> bool {
        let minute = now.0 / 60;
        // A poisoned lock only means another fetch panicked; the counter is still usable.
        let mut w = self
            .window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.0 != minute {
            *w = (minute, 0);
        }
        if w.1 >= self.policy.per_minute {
            return false;
        }
        w.1 += 1;
        true
    }

    /// One fetch of a known `url` from this minute's reserve: at most one per URL, at most
    /// `known_per_minute` in all.
    fn take_reserve(&self, url: &Url, now: UnixTime) -> bool {
        let minute = now.0 / 60;
        let mut r = self
            .reserve
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if r.0 != minute {
            *r = (minute, HashSet::new());
        }
        if r.1.len() >= self.policy.known_per_minute as usize || r.1.contains(url.as_str()) {
            return false;
        }
        r.1.insert(url.as_str().to_owned());
        true
    }

    /// One attempt from `ip` this minute; `None` (no connection info) is not counted here.
    fn take_ip_token(&self, ip: Option<IpAddr>, now: UnixTime) -> bool {
        let Some(ip) = ip else { return true };
        let key = source_key(ip);
        let minute = now.0 / 60;
        let mut w = self
            .per_ip
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.0 != minute {
            *w = (minute, HashMap::new());
        }
        if !w.1.contains_key(&key) && w.1.len() >= MAX_TRACKED_IPS {
            return false;
        }
        let n = w.1.entry(key).or_insert(0);
        if *n >= self.policy.per_ip_per_minute {
            return false;
        }
        *n += 1;
        true
    }

    /// The addresses `url` may be fetched from, or why none may.
    pub async fn checked_addresses(&self, url: &Url) -> Result<Vec<SocketAddr>, FetchError> {
        let port = url
            .port_or_known_default()
            .ok_or(FetchError::Unresolvable)?;
        let addrs = match url.host() {
            Some(Host::Ipv4(ip)) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
            Some(Host::Ipv6(ip)) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
            // The lookup has the fetch's time limit too (the system resolver can hang for as
            // long as resolv.conf allows). Running out of it is a passing trouble, not a bad
            // client: `Unreachable`, so `/token` answers 503 and a stored copy stands in.
            Some(Host::Domain(name)) => {
                tokio::time::timeout(self.policy.timeout, self.resolver.resolve(name, port))
                    .await
                    .map_err(|_| FetchError::Unreachable)?
                    .map_err(|_| FetchError::Unresolvable)?
            }
            None => return Err(FetchError::Unresolvable),
        };
        if addrs.is_empty() {
            return Err(FetchError::Unresolvable);
        }
        // One bad address refuses the whole name: a mixed answer is how rebinding starts.
        if addrs
            .iter()
            .any(|a| !address_allowed(a.ip(), self.policy.allow_loopback))
        {
            return Err(FetchError::SpecialUseAddress);
        }
        Ok(addrs)
    }

    /// Fetches `url` (already validated as a client id URL) for a request from `from`.
    pub async fn fetch(
        &self,
        url: &Url,
        now: UnixTime,
        from: Option<IpAddr>,
        familiarity: Familiarity,
    ) -> Result<Fetched, FetchError> {
        self.fetch_capped(url, now, from, familiarity, MAX_BODY_BYTES)
            .await
    }

    /// Fetches a client's key set (`jwks_uri`, validated like a client id URL) under the same
    /// rules and budgets as documents, with a body of at most `max_body` bytes.
    pub async fn fetch_keys(
        &self,
        url: &Url,
        now: UnixTime,
        from: Option<IpAddr>,
        familiarity: Familiarity,
        max_body: usize,
    ) -> Result<Fetched, FetchError> {
        self.fetch_capped(url, now, from, familiarity, max_body)
            .await
    }

    async fn fetch_capped(
        &self,
        url: &Url,
        now: UnixTime,
        from: Option<IpAddr>,
        familiarity: Familiarity,
        max_body: usize,
    ) -> Result<Fetched, FetchError> {
        let known = familiarity == Familiarity::Known;
        // The caller's own budget first: it also bounds the name lookups one source causes.
        // A known URL whose source spent its share may still use the reserve (taken before
        // the lookup, so the reserve bounds those lookups instead).
        let mut reserved = false;
        if !self.take_ip_token(from, now) {
            if !(known && self.take_reserve(url, now)) {
                return Err(FetchError::RateLimited);
            }
            reserved = true;
        }
        let addrs = self.checked_addresses(url).await?;
        if url.scheme() != "https" && !addrs.iter().all(|a| is_loopback(a.ip())) {
            // Plain http is only ever allowed to loopback (development setting).
            return Err(FetchError::SpecialUseAddress);
        }
        // Everyone's budget only for a fetch that will really be made; a known URL falls back
        // to the reserve when it is spent.
        let budgeted = reserved || self.take_token(now) || (known && self.take_reserve(url, now));
        if !budgeted {
            return Err(FetchError::RateLimited);
        }
        // Pinned to the checked addresses, no DNS, never through a proxy (`outbound`).
        let pinned = match url.host() {
            Some(Host::Domain(name)) => Some((name, addrs.as_slice())),
            _ => None,
        };
        let client = outbound::metadata_document(self.policy.timeout, pinned)
            .map_err(|_| FetchError::Unreachable)?;
        let mut resp = client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|_| FetchError::Unreachable)?;
        let status = resp.status();
        if status.is_redirection() {
            return Err(FetchError::Redirect);
        }
        if status != reqwest::StatusCode::OK {
            return Err(FetchError::Status(status.as_u16()));
        }
        if resp.content_length().is_some_and(|n| n > max_body as u64) {
            return Err(FetchError::TooLarge);
        }
        let cache_control = resp
            .headers()
            .get(reqwest::header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|_| FetchError::Unreachable)? {
            if body.len() + chunk.len() > max_body {
                return Err(FetchError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched {
            body,
            cache_control,
        })
    }
}

/// Whether `ip` is a loopback address (including its IPv4-mapped form).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The address policy: may the proxy connect to `ip` to fetch a client's document? Public
/// unicast only (RFC 6890 special-purpose ranges refused); loopback only with the development
/// setting.
pub fn address_allowed(ip: IpAddr, allow_loopback: bool) -> bool {
    if is_loopback(ip) {
        return allow_loopback;
    }
    match ip {
        IpAddr::V4(v4) => v4_public(v4),
        IpAddr::V6(v6) => v6_public(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn v4_public(ip: Ipv4Addr) -> bool {
    const SPECIAL: [([u8; 4], u32); 16] = [
        ([0, 0, 0, 0], 8),       // "this network"
        ([10, 0, 0, 0], 8),      // private
        ([100, 64, 0, 0], 10),   // carrier-grade NAT
        ([127, 0, 0, 0], 8),     // loopback
        ([169, 254, 0, 0], 16),  // link-local, cloud metadata
        ([172, 16, 0, 0], 12),   // private
        ([192, 0, 0, 0], 24),    // IETF protocol assignments
        ([192, 0, 2, 0], 24),    // documentation
        ([192, 31, 196, 0], 24), // AS112
        ([192, 52, 193, 0], 24), // AMT
        ([192, 88, 99, 0], 24),  // 6to4 relay anycast
        ([192, 168, 0, 0], 16),  // private
        ([198, 18, 0, 0], 15),   // benchmarking
        ([198, 51, 100, 0], 24), // documentation
        ([203, 0, 113, 0], 24),  // documentation
        ([224, 0, 0, 0], 3),     // multicast 224/4 and reserved 240/4, broadcast
    ];
    !SPECIAL.iter().any(|(net, bits)| in_v4(ip, *net, *bits))
}

fn v6_public(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    // IPv4 embedded by translation: judged by the IPv4 address inside.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_public(v4);
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        return v4_public(Ipv4Addr::new(a, b, c, d));
    }
    // Only global unicast (2000::/3) is public; ::, ::1, IPv4-compatible, fc00::/7, fe80::/10,
    // ff00::/8 and everything else unassigned fall outside it.
    if s[0] & 0xe000 != 0x2000 {
        return false;
    }
    let special: [(u16, u16, u32); 5] = [
        (0x2001, 0x0000, 23), // IETF protocol assignments (Teredo, ORCHID, …)
        (0x2001, 0x0db8, 32), // documentation
        (0x2002, 0x0000, 16), // 6to4 (embeds arbitrary IPv4)
        (0x3fff, 0x0000, 20), // documentation (RFC 9637)
        (0x5f00, 0x0000, 16), // SRv6 SIDs
    ];
    let top = (u32::from(s[0]) << 16) | u32::from(s[1]);
    !special.iter().any(|(a, b, bits)| {
        let net = (u32::from(*a) << 16) | u32::from(*b);
        let mask = u32::MAX << (32 - bits);
        top & mask == net & mask
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(s: &str) -> bool {
        address_allowed(s.parse().unwrap(), false)
    }

    #[test]
    fn special_use_ipv4_ranges_are_refused() {
        for a in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.255.255.254",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!allowed(a), "{a} must be refused");
        }
    }

    #[test]
    fn public_ipv4_is_allowed_including_range_neighbours() {
        for a in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.255.255",
            "172.32.0.1",
            "169.253.1.1",
            "192.0.3.1",
            "198.17.255.255",
            "198.20.0.1",
            "223.255.255.254",
            "11.0.0.1",
        ] {
            assert!(allowed(a), "{a} must be allowed");
        }
    }

    #[test]
    fn special_use_ipv6_ranges_are_refused() {
        for a in [
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:0:0",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::1",
            "100::1",
            "2001::1",
            "2001:db8::1",
            "2002:7f00:1::1",
            "3fff::1",
            "5f00::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
        ] {
            assert!(!allowed(a), "{a} must be refused");
        }
    }

    #[test]
    fn public_ipv6_is_allowed() {
        for a in [
            "2606:4700:4700::1111",
            "2a00:1450:4001::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2001:4860:4860::8888",
        ] {
            assert!(allowed(a), "{a} must be allowed");
        }
    }

    #[test]
    fn loopback_only_with_the_development_setting() {
        for a in ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(!address_allowed(ip, false), "{a}");
            assert!(address_allowed(ip, true), "{a}");
        }
        // The setting opens loopback and nothing else.
        for a in ["10.0.0.1", "169.254.169.254", "fe80::1", "0.0.0.0", "::"] {
            assert!(!address_allowed(a.parse().unwrap(), true), "{a}");
        }
    }

    struct Fixed(Vec<SocketAddr>);
    #[async_trait]
    impl Resolver for Fixed {
        async fn resolve(&self, _h: &str, _p: u16) -> std::io::Result<Vec<SocketAddr>> {
            Ok(self.0.clone())
        }
    }

    struct Hanging;
    #[async_trait]
    impl Resolver for Hanging {
        async fn resolve(&self, _h: &str, _p: u16) -> std::io::Result<Vec<SocketAddr>> {
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_name_lookup_ends_at_the_fetch_timeout_as_a_passing_failure() {
        let f = Fetcher::new(
            Arc::new(Hanging),
            FetchPolicy {
                timeout: Duration::from_secs(1),
                per_minute: 10,
                per_ip_per_minute: 3,
                known_per_minute: 2,
                allow_loopback: false,
            },
        );
        let url = Url::parse("https://slow-dns.example/c").unwrap();
        let err = f.checked_addresses(&url).await.unwrap_err();
        assert_eq!(err, FetchError::Unreachable);
        assert!(
            err.is_temporary(),
            "503 and the stored copy, never invalid_client"
        );
    }

    fn fetcher(addrs: &[&str], per_minute: u32) -> Fetcher {
        Fetcher::new(
            Arc::new(Fixed(addrs.iter().map(|a| a.parse().unwrap()).collect())),
            FetchPolicy {
                timeout: Duration::from_secs(1),
                per_minute,
                per_ip_per_minute: 3,
                known_per_minute: 2,
                allow_loopback: false,
            },
        )
    }

    #[tokio::test]
    async fn one_special_address_among_public_ones_refuses_the_name() {
        let f = fetcher(&["8.8.8.8:443", "10.0.0.1:443"], 10);
        let url = Url::parse("https://mixed.example/c").unwrap();
        assert_eq!(
            f.checked_addresses(&url).await,
            Err(FetchError::SpecialUseAddress)
        );
    }

    #[tokio::test]
    async fn refused_addresses_do_not_spend_the_global_budget() {
        let f = fetcher(&["10.0.0.1:443"], 1);
        let url = Url::parse("https://x.example/c").unwrap();
        let t = UnixTime(600);
        for ip in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
            assert_eq!(
                f.fetch(&url, t, Some(ip.parse().unwrap()), Familiarity::New)
                    .await
                    .unwrap_err(),
                FetchError::SpecialUseAddress
            );
        }
        // The one global token is still there.
        assert!(f.take_token(t));
        assert!(!f.take_token(t));
        assert!(f.take_token(UnixTime(660)));
    }

    #[tokio::test]
    async fn one_source_is_limited_per_minute_and_ipv6_per_48() {
        let f = fetcher(&["10.0.0.1:443"], 100);
        let url = Url::parse("https://x.example/c").unwrap();
        let t = UnixTime(600);
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        // Another /64 of the same /48 is the same source.
        let same_64: IpAddr = "2001:db8:1:ffff::99".parse().unwrap();
        for _ in 0..3 {
            assert_eq!(
                f.fetch(&url, t, Some(a), Familiarity::New)
                    .await
                    .unwrap_err(),
                FetchError::SpecialUseAddress
            );
        }
        assert_eq!(
            f.fetch(&url, t, Some(same_64), Familiarity::New)
                .await
                .unwrap_err(),
            FetchError::RateLimited
        );
        // Another source, and the next minute, are not affected.
        assert_eq!(
            f.fetch(&url, t, Some("8.8.8.8".parse().unwrap()), Familiarity::New)
                .await
                .unwrap_err(),
            FetchError::SpecialUseAddress
        );
        assert_eq!(
            f.fetch(&url, UnixTime(660), Some(a), Familiarity::New)
                .await
                .unwrap_err(),
            FetchError::SpecialUseAddress
        );
    }

    #[test]
    fn source_key_is_the_ipv4_address_or_the_ipv6_slash_48() {
        let k = |s: &str| source_key(s.parse().unwrap());
        assert_eq!(k("2001:db8:1:2::1"), k("2001:db8:1:ffff:1:2:3:4"));
        assert_ne!(k("2001:db8:1::1"), k("2001:db8:2::1"));
        assert_eq!(k("2001:db8:1:2::1").to_string(), "2001:db8:1::");
        assert_eq!(k("198.51.100.7").to_string(), "198.51.100.7");
        assert_eq!(k("::ffff:198.51.100.7"), k("198.51.100.7"));
    }

    #[test]
    fn the_reserve_is_for_known_urls_once_per_url_per_minute() {
        let f = fetcher(&["10.0.0.1:443"], 1);
        let t = UnixTime(600);
        let a = Url::parse("https://a.example/c").unwrap();
        let b = Url::parse("https://b.example/c").unwrap();
        let c = Url::parse("https://c.example/c").unwrap();
        assert!(f.take_reserve(&a, t));
        assert!(!f.take_reserve(&a, t), "once per URL per minute");
        assert!(f.take_reserve(&b, t));
        assert!(!f.take_reserve(&c, t), "reserve (2) spent");
        assert!(f.take_reserve(&a, UnixTime(660)), "a new minute");
    }

    #[tokio::test]
    async fn a_new_url_never_uses_the_reserve() {
        // Addresses pass (loopback allowed), and nothing listens on port 9: the fetch itself
        // fails, which is enough to tell a spent budget from one that let the fetch start.
        let f = Fetcher::new(
            Arc::new(Fixed(vec!["127.0.0.1:9".parse().unwrap()])),
            FetchPolicy {
                timeout: Duration::from_secs(1),
                per_minute: 1,
                per_ip_per_minute: 100,
                known_per_minute: 5,
                allow_loopback: true,
            },
        );
        let t = UnixTime(600);
        let from = Some("198.51.100.1".parse().unwrap());
        let url = |n: u32| Url::parse(&format!("https://x{n}.example/c")).unwrap();
        assert_eq!(
            f.fetch(&url(0), t, from, Familiarity::New)
                .await
                .unwrap_err(),
            FetchError::Unreachable,
            "the general token"
        );
        assert_eq!(
            f.fetch(&url(1), t, from, Familiarity::New)
                .await
                .unwrap_err(),
            FetchError::RateLimited
        );
        assert_eq!(
            f.fetch(&url(2), t, from, Familiarity::Known)
                .await
                .unwrap_err(),
            FetchError::Unreachable,
            "a known URL gets the reserve"
        );
        assert_eq!(
            f.fetch(&url(2), t, from, Familiarity::Known)
                .await
                .unwrap_err(),
            FetchError::RateLimited,
            "once per minute"
        );
    }
}
