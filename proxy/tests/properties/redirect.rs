//! Redirect URIs: validation at registration and matching at `/authorize`.

use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::TestCaseError;

use mcp_oauth_proxy::bindings::redirect::{
    RedirectError, match_redirect, validate_for_registration,
};
use mcp_oauth_proxy::ids::ClientId;

use crate::generators::*;

fn is_loopback(host: Option<url::Host<&str>>) -> bool {
    match host {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// What "safe" means for an accepted redirect URI.
pub(crate) fn assert_safe_redirect(uri: &str) -> Result<(), TestCaseError> {
    prop_assert!(uri.len() <= 2000);
    prop_assert!(!uri.contains('#'), "fragment in {:?}", uri);
    prop_assert!(
        !uri.chars().any(|c| c.is_whitespace() || c.is_control()),
        "whitespace or control in {:?}",
        uri
    );
    let url = url::Url::parse(uri).map_err(|e| TestCaseError::fail(format!("{uri:?}: {e}")))?;
    prop_assert!(url.fragment().is_none());
    prop_assert!(
        url.username().is_empty() && url.password().is_none(),
        "user info in {:?}",
        uri
    );
    let raw_scheme = uri
        .split(':')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    prop_assert!(
        !DANGEROUS.contains(&raw_scheme.as_str()) && !DANGEROUS.contains(&url.scheme()),
        "dangerous scheme in {:?}",
        uri
    );
    match url.scheme() {
        "http" => {
            prop_assert!(
                is_loopback(url.host()),
                "plain http off loopback: {:?}",
                uri
            );
            // Canonical spelling and a real port, in the raw text that is stored and matched.
            let authority = &uri["http://".len()..];
            let authority = &authority[..authority.find(['/', '?']).unwrap_or(authority.len())];
            let (host, port) = match authority.rsplit_once(':') {
                Some((h, p)) if !authority.ends_with(']') => (h, Some(p)),
                _ => (authority, None),
            };
            prop_assert!(
                ["127.0.0.1", "[::1]", "localhost"].contains(&host),
                "non-canonical loopback host in {:?}",
                uri
            );
            if let Some(p) = port {
                prop_assert!(
                    !p.starts_with('0') && p.parse::<u16>().is_ok_and(|n| n > 0),
                    "bad port in {:?}",
                    uri
                );
            }
        }
        "https" => prop_assert!(url.host_str().is_some_and(|h| !h.is_empty())),
        _ => {
            // A private-use scheme is a reverse domain name (RFC 8252 §7.1).
            let raw = uri.split(':').next().unwrap_or_default();
            prop_assert!(
                raw.contains('.') && !raw.starts_with('.') && !raw.ends_with('.'),
                "not reverse-domain: {:?}",
                uri
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(CASES * 4))]

    #[test]
    fn redirect_validation_never_panics(uri in prop_oneof![junk(), uri_like()]) {
        let _ = validate_for_registration(&uri);
        let reg = vec![uri.clone()];
        let _ = match_redirect(&ClientId::new("c"), &reg, Some(&uri));
        let _ = match_redirect(&ClientId::new("c"), &reg, Some("http://127.0.0.1:1/cb"));
        let _ = match_redirect(&ClientId::new("c"), &["http://127.0.0.1/cb".to_owned()], Some(&uri));
        if let Ok(m) = match_redirect(&ClientId::new("c"), &reg, None) {
            let _ = (m.destination_key(), m.is_loopback(), m.registered(), m.uri(), m.explicit());
        }
    }

    #[test]
    fn accepted_redirect_uris_are_safe(uri in prop_oneof![3 => uri_like(), 1 => junk()]) {
        if validate_for_registration(&uri).is_ok() {
            assert_safe_redirect(&uri)?;
        }
    }

    #[test]
    fn dangerous_schemes_are_refused_in_any_letter_case(
        scheme in select(DANGEROUS).prop_flat_map(random_case),
        rest in prop_oneof![
            select(vec![":alert(1)", "://app.example/cb", ":/cb", ":text/html,x", "://127.0.0.1/cb", ":"]).prop_map(str::to_owned),
            junk().prop_map(|j| format!(":{j}")),
        ],
    ) {
        let uri = format!("{scheme}{rest}");
        prop_assert!(validate_for_registration(&uri).is_err(), "accepted {:?}", uri);
    }
}

proptest! {
    #![proptest_config(cases(CASES * 2))]

    #[test]
    fn exact_registered_redirect_always_matches_and_is_preferred(
        registered in prop::collection::vec(
            prop_oneof![
                uri_like(),
                https_uri(),
                loopback_parts().prop_map(|(h, p, path, q)| format!("http://{h}{}{path}{q}", port_text(p))),
            ],
            1..5,
        ),
        which in any::<Index>(),
    ) {
        let wanted = registered[which.index(registered.len())].clone();
        let m = match_redirect(&ClientId::new("c"), &registered, Some(&wanted)).unwrap();
        prop_assert_eq!(m.uri(), wanted.as_str());
        prop_assert_eq!(m.registered(), wanted.as_str());
        prop_assert_eq!(m.client_id().as_str(), "c");
        match registered.as_slice() {
            [only] => {
                let m = match_redirect(&ClientId::new("c"), &registered, None).unwrap();
                prop_assert_eq!(m.uri(), only.as_str());
            }
            _ => prop_assert_eq!(match_redirect(&ClientId::new("c"), &registered, None), Err(RedirectError::Missing)),
        }
    }

    #[test]
    fn one_char_edit_of_non_loopback_redirect_never_matches(reg in https_uri(), e in edit()) {
        let requested = apply(&reg, &e);
        prop_assume!(requested != reg);
        prop_assert_eq!(
            match_redirect(&ClientId::new("c"), &[reg], Some(&requested)),
            Err(RedirectError::Mismatch)
        );
    }

    #[test]
    fn loopback_redirect_matches_with_any_port(
        (host, port, path, query) in loopback_parts(),
        other_port in prop::option::of(any::<u16>()),
    ) {
        let reg = format!("http://{host}{}{path}{query}", port_text(port));
        let req = format!("http://{host}{}{path}{query}", port_text(other_port.filter(|p| *p != 0)));
        let m = match_redirect(&ClientId::new("c"), std::slice::from_ref(&reg), Some(&req)).unwrap();
        prop_assert_eq!(m.uri(), req.as_str());
        prop_assert_eq!(m.registered(), reg.as_str());
        prop_assert!(m.is_loopback());
    }

    #[test]
    fn loopback_redirect_never_matches_a_port_outside_1_to_65535(
        (host, port, path, query) in loopback_parts(),
        bad in prop_oneof![
            Just("0".to_owned()),
            (65_536u32..1_000_000).prop_map(|p| p.to_string()),
            (1u16..).prop_map(|p| format!("0{p}")),
            Just(String::new()),
        ],
    ) {
        let reg = format!("http://{host}{}{path}{query}", port_text(port));
        let req = format!("http://{host}:{bad}{path}{query}");
        prop_assert_eq!(
            match_redirect(&ClientId::new("c"), &[reg], Some(&req)),
            Err(RedirectError::Mismatch)
        );
        prop_assert!(validate_for_registration(&req).is_err(), "registered {:?}", req);
    }

    #[test]
    fn loopback_redirect_never_matches_another_scheme_host_path_or_query(
        (host, port, path, query) in loopback_parts(),
        scheme2 in select(vec!["http", "http", "https", "HTTP", "Http"]),
        host2 in select(vec![
            "127.0.0.1", "[::1]", "localhost", "LOCALHOST", "127.0.0.2", "127.0.0.1.evil.example",
            "evil.example", "localhost.evil", "[::2]", "127.0.0.1@evil.example", "[0:0:0:0:0:0:0:1]",
        ]),
        (_, port2, path2, query2) in loopback_parts(),
        keep in (any::<bool>(), any::<bool>(), any::<bool>()),
    ) {
        // Keep some parts identical often enough that near misses are common.
        let host2 = if keep.0 { host } else { host2 };
        let path2 = if keep.1 { path.clone() } else { path2 };
        let query2 = if keep.2 { query.clone() } else { query2 };
        prop_assume!(scheme2 != "http" || host2 != host || format!("{path2}{query2}") != format!("{path}{query}"));
        let reg = format!("http://{host}{}{path}{query}", port_text(port));
        let req = format!("{scheme2}://{host2}{}{path2}{query2}", port_text(port2));
        prop_assert_eq!(
            match_redirect(&ClientId::new("c"), &[reg], Some(&req)),
            Err(RedirectError::Mismatch)
        );
    }

    #[test]
    fn one_char_edit_of_loopback_redirect_matches_only_if_just_the_port_changed(
        (host, port, path, query) in loopback_parts(),
        e in edit(),
    ) {
        let reg = format!("http://{host}{}{path}{query}", port_text(port));
        let requested = apply(&reg, &e);
        if match_redirect(&ClientId::new("c"), std::slice::from_ref(&reg), Some(&requested)).is_ok() {
            let rest = format!("{path}{query}");
            let port_part = requested
                .strip_prefix("http://")
                .and_then(|r| r.strip_prefix(host))
                .and_then(|r| r.strip_suffix(rest.as_str()));
            prop_assert!(
                port_part.is_some_and(|p| p.is_empty()
                    || (p.len() >= 2 && p.len() <= 6 && p.starts_with(':') && p[1..].bytes().all(|b| b.is_ascii_digit()))),
                "{:?} matched {:?}",
                requested,
                reg
            );
        }
    }
}
