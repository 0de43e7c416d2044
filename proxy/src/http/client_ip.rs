//! The one place that decides a request's client IP (for rate limits and audit).
//!
//! The TCP peer is the client, unless the peer is a configured trusted proxy: then the
//! configured forwarded header (`X-Forwarded-For` or RFC 7239 `Forwarded`) is walked from the
//! right, skipping trusted hops, and the first untrusted address is the client. Everything to
//! its left was written by the client itself and is never believed, and a header from an
//! untrusted peer is ignored entirely.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request};
use http::HeaderMap;
use ipnet::IpNet;

/// The client's IP as decided by [`resolve`], in request extensions for handlers and audit.
/// Absent only when the router runs without connection info (in-process benchmarks). Only
/// [`attach`] makes one, so a handler's `ClientIp` is never a forwarded header believed from
/// an untrusted peer. `Clone` and `Copy`: it is a plain address, and axum's `Extension`
/// extractor hands handlers a copy of what [`attach`] inserted.
///
/// ```compile_fail
/// use mcp_oauth_proxy::http::client_ip::ClientIp;
/// // Private field: a handler cannot take an address from a header and call it the client's.
/// let forged = ClientIp("203.0.113.7".parse().unwrap());
/// ```
///
/// ```
/// use mcp_oauth_proxy::http::client_ip::ClientIp;
/// fn address(c: ClientIp) -> std::net::IpAddr {
///     c.ip()
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(IpAddr);

impl ClientIp {
    /// The address.
    pub fn ip(self) -> IpAddr {
        self.0
    }
}

/// Parses one node of a forwarded chain: `1.2.3.4`, `1.2.3.4:80`, `::1`, `[::1]`,
/// `[::1]:80`, optionally quoted. Obfuscated identifiers and `unknown` are not addresses.
fn parse_node(s: &str) -> Option<IpAddr> {
    let s = s.trim().trim_matches('"');
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (inside, _) = rest.split_once(']')?;
        return inside.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    }
    s.parse::<SocketAddr>().ok().map(|a| a.ip().to_canonical())
}

/// The hops listed in the configured header, left (the original client) to right (the last
/// proxy); `None` for an entry that is not an address. Each comma-separated element is read
/// from the raw bytes on its own: a client can put any byte in the part it writes, and one
/// non-ASCII byte must not make the whole header unreadable (that would hand the request the
/// trusted proxy's address and bucket).
fn chain(headers: &HeaderMap, which: ForwardedHeader) -> Vec<Option<IpAddr>> {
    let name = match which {
        ForwardedHeader::XForwardedFor => "x-forwarded-for",
        ForwardedHeader::Forwarded => "forwarded",
    };
    headers
        .get_all(name)
        .iter()
        .flat_map(|value| value.as_bytes().split(|b| *b == b','))
        .map(|raw| {
            let element = std::str::from_utf8(raw).ok().filter(|e| e.is_ascii())?;
            match which {
                ForwardedHeader::XForwardedFor => parse_node(element),
                ForwardedHeader::Forwarded => element
                    .split(';')
                    .find_map(|pair| {
                        let (k, v) = pair.split_once('=')?;
                        k.trim().eq_ignore_ascii_case("for").then_some(v)
                    })
                    .and_then(parse_node),
            }
        })
        .collect()
}

/// Decides the client IP of a request that arrived from `peer`.
pub fn resolve(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> IpAddr {
    let mut current = peer.to_canonical();
    if !trusted.contains(current) {
        return current;
    }
    for hop in chain(headers, trusted.header).into_iter().rev() {
        match hop {
            Some(ip) => current = ip,
            // Garbage where an address should be: stop at the last hop we can vouch for
            // rather than guess (that proxy's IP then stands for the request).
            None => return current,
        }
        if !trusted.contains(current) {
            return current;
        }
    }
    current
}

/// Decides the client IP of `req` and puts it into its extensions as [`ClientIp`]; returns
/// it for the caller to scope the rest of the request under (`audit::source`). `None` only
/// without connection info (in-process benchmarks). Called by the edge (`http::front`) for
/// every request before routing.
pub fn attach(req: &mut Request, trusted: &TrustedProxies) -> Option<IpAddr> {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(a)| a.ip())?;
    let ip = resolve(peer, req.headers(), trusted);
    req.extensions_mut().insert(ClientIp(ip));
    Some(ip)
}

/// Which forwarded header a trusted proxy sets (`[server] forwarded_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

/// Peers whose forwarded header is believed, and which header that is. Empty: the TCP peer is
/// the client (the proxy terminates TLS itself or nothing sits in front of it).
#[derive(Debug, Clone)]
pub struct TrustedProxies {
    /// Addresses or networks of the load balancers in front of the proxy.
    pub nets: Vec<IpNet>,
    /// The header they set; the other one is ignored even from them.
    pub header: ForwardedHeader,
}

impl Default for TrustedProxies {
    fn default() -> Self {
        TrustedProxies {
            nets: Vec::new(),
            header: ForwardedHeader::XForwardedFor,
        }
    }
}

impl TrustedProxies {
    /// Whether `ip` is one of the trusted proxies.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|n| n.contains(&ip))
    }
}

/// Parses `[server] trusted_proxies` (IPs or CIDRs) and `forwarded_header`.
pub fn trusted_proxies(
    list: &[String],
    header: Option<&str>,
    errs: &mut Vec<String>,
) -> TrustedProxies {
    let mut nets = Vec::new();
    for s in list {
        let s = s.trim();
        if let Ok(net) = s.parse::<IpNet>() {
            // A network written with host bits set (10.0.0.1/8) is almost always a typo.
            if net.trunc() != net {
                errs.push(format!(
                    "server.trusted_proxies: {s:?} has host bits set; did you mean {}?",
                    net.trunc()
                ));
            } else if net.prefix_len() == 0 {
                errs.push(format!(
                    "server.trusted_proxies: {s:?} trusts every address, which lets any client choose its own IP"
                ));
            } else {
                nets.push(net);
            }
        } else if let Ok(ip) = s.parse::<IpAddr>() {
            nets.push(IpNet::from(ip.to_canonical()));
        } else {
            errs.push(format!(
                "server.trusted_proxies: {s:?} is not an IP address or CIDR network like 10.0.0.0/8"
            ));
        }
    }
    let header = match header.map(str::to_ascii_lowercase).as_deref() {
        None | Some("x-forwarded-for") => ForwardedHeader::XForwardedFor,
        Some("forwarded") => ForwardedHeader::Forwarded,
        Some(other) => {
            errs.push(format!(
                "server.forwarded_header: {other:?} is not \"x-forwarded-for\" or \"forwarded\""
            ));
            ForwardedHeader::XForwardedFor
        }
    };
    TrustedProxies { nets, header }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn trusted(nets: &[&str], header: ForwardedHeader) -> TrustedProxies {
        TrustedProxies {
            nets: nets.iter().map(|n| n.parse().unwrap()).collect(),
            header,
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const LB: &str = "10.0.0.5";

    #[test]
    fn direct_client_is_the_peer() {
        let t = trusted(&[], ForwardedHeader::XForwardedFor);
        assert_eq!(
            resolve(ip("203.0.113.7"), &HeaderMap::new(), &t),
            ip("203.0.113.7")
        );
    }

    #[test]
    fn spoofed_forwarded_for_from_an_untrusted_peer_is_ignored() {
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "198.51.100.1")]);
        assert_eq!(resolve(ip("203.0.113.7"), &h, &t), ip("203.0.113.7"));
    }

    #[test]
    fn client_prepended_addresses_behind_a_trusted_proxy_are_not_believed() {
        // The client sent "X-Forwarded-For: 1.1.1.1"; the load balancer appended its peer.
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.7")]);
        assert_eq!(resolve(ip(LB), &h, &t), ip("203.0.113.7"));
    }

    #[test]
    fn several_trusted_hops_are_skipped_from_the_right() {
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[
            ("x-forwarded-for", "9.9.9.9, 203.0.113.7"),
            ("x-forwarded-for", "10.1.1.1, 10.2.2.2"),
        ]);
        assert_eq!(resolve(ip(LB), &h, &t), ip("203.0.113.7"));
    }

    #[test]
    fn spoofing_a_trusted_address_to_hide_behind_it_stops_at_the_next_real_hop() {
        // A client claiming to be another internal proxy still ends up as itself: its own
        // address is the first untrusted one from the right.
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "10.9.9.9, 203.0.113.7")]);
        assert_eq!(resolve(ip(LB), &h, &t), ip("203.0.113.7"));
    }

    #[test]
    fn garbage_injected_into_the_chain_falls_back_to_the_last_trusted_hop() {
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "203.0.113.7, not-an-ip")]);
        assert_eq!(resolve(ip(LB), &h, &t), ip(LB));
        let h = headers(&[("x-forwarded-for", "")]);
        assert_eq!(resolve(ip(LB), &h, &t), ip(LB));
    }

    #[test]
    fn the_other_forwarded_header_is_ignored_even_from_a_trusted_proxy() {
        // The load balancer writes X-Forwarded-For; a client-supplied Forwarded passes through
        // untouched and must not choose the IP.
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[
            ("forwarded", "for=198.51.100.1"),
            ("x-forwarded-for", "203.0.113.7"),
        ]);
        assert_eq!(resolve(ip(LB), &h, &t), ip("203.0.113.7"));
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        let h = headers(&[
            ("x-forwarded-for", "198.51.100.1"),
            (
                "forwarded",
                "for=1.1.1.1, For=\"[2001:db8:cafe::17]:4711\";proto=https, for=10.0.0.9",
            ),
        ]);
        assert_eq!(resolve(ip(LB), &h, &t), ip("2001:db8:cafe::17"));
    }

    #[test]
    fn a_non_ascii_byte_in_the_client_written_part_does_not_hide_the_client_behind_the_proxy() {
        // The client sent "X-Forwarded-For: \xff"; the load balancer appended its peer.
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"1.1.1.1\xff, \xc3\xa9, 203.0.113.7").unwrap(),
        );
        assert_eq!(resolve(ip(LB), &h, &t), ip("203.0.113.7"));
        // Also across repeated header lines, and in RFC 7239 Forwarded.
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", HeaderValue::from_bytes(b"\xfe").unwrap());
        h.append("x-forwarded-for", HeaderValue::from_static("203.0.113.8"));
        assert_eq!(resolve(ip(LB), &h, &t), ip("203.0.113.8"));
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        let mut h = HeaderMap::new();
        h.append(
            "forwarded",
            HeaderValue::from_bytes(b"for=\"\xff\", for=203.0.113.9;proto=https").unwrap(),
        );
        assert_eq!(resolve(ip(LB), &h, &t), ip("203.0.113.9"));
        // Garbage in the element the trusted proxy wrote still stops at that proxy.
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"203.0.113.7, 10.1.1.1\xff").unwrap(),
        );
        assert_eq!(resolve(ip(LB), &h, &t), ip(LB));
    }

    #[test]
    fn obfuscated_forwarded_node_is_not_an_address() {
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::Forwarded);
        let h = headers(&[("forwarded", "for=_hidden, for=unknown")]);
        assert_eq!(resolve(ip(LB), &h, &t), ip(LB));
    }

    #[test]
    fn ipv4_mapped_ipv6_cannot_dodge_the_trust_list_or_the_bucket() {
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "::ffff:203.0.113.7")]);
        assert_eq!(resolve(ip("::ffff:10.0.0.5"), &h, &t), ip("203.0.113.7"));
    }

    #[test]
    fn ports_in_forwarded_for_are_dropped() {
        let t = trusted(&["10.0.0.0/8"], ForwardedHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "203.0.113.7:5555, [2001:db8::1]:443")]);
        assert_eq!(resolve(ip(LB), &h, &t), ip("2001:db8::1"));
    }

    #[test]
    fn trusted_proxies_accept_ips_and_networks_and_refuse_trust_everyone() {
        let mut errs = Vec::new();
        let t = trusted_proxies(
            &["10.0.0.0/8".into(), "127.0.0.1".into(), "fd00::/8".into()],
            None,
            &mut errs,
        );
        assert!(errs.is_empty(), "{errs:?}");
        assert!(t.contains("10.1.2.3".parse().unwrap()));
        assert!(t.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(t.contains("127.0.0.1".parse().unwrap()));
        assert!(!t.contains("127.0.0.2".parse().unwrap()));
        assert!(!t.contains("11.0.0.1".parse().unwrap()));
        for bad in [
            "0.0.0.0/0",
            "::/0",
            "10.0.0.1/8",
            "lb.internal",
            "10.0.0.0/33",
        ] {
            let mut errs = Vec::new();
            trusted_proxies(&[bad.into()], None, &mut errs);
            assert_eq!(errs.len(), 1, "{bad}: {errs:?}");
        }
        let mut errs = Vec::new();
        trusted_proxies(&[], Some("X-Real-IP"), &mut errs);
        assert_eq!(errs.len(), 1);
    }
}
