//! `private_key_jwt` (RFC 7523 §2.2): clients that sign a client assertion with a key they
//! publish, as ChatGPT's metadata document does. The keys are made here, at test time; the
//! document and its key set are served by the test document server on loopback.

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use super::cimd::DEV;
use super::doc_server::DocServer;
use crate::support::client::JsonResp;
use crate::support::{Browser, Client, Options, Pkce, TestProxy, http};
use mcp_oauth_proxy::clock::Clock;
use mcp_oauth_proxy::crypto;
use mcp_oauth_proxy::store::Keyspace;

const REDIRECT: &str = "https://chatgpt.example/connector/oauth/cb";
const JWKS_PATH: &str = "/oauth/jwks.json";
const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// A client's signing key, made for this test.
struct Signer {
    enc: EncodingKey,
    alg: Algorithm,
    kid: String,
    public: Jwk,
}

impl Signer {
    fn es256(kid: &str) -> Signer {
        let kp = rcgen::KeyPair::generate().unwrap();
        let enc = EncodingKey::from_ec_der(&kp.serialize_der());
        Signer::with(enc, Algorithm::ES256, kid)
    }

    fn ed25519(kid: &str) -> Signer {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        // ring writes PKCS#8 v2 (seed and public key); jsonwebtoken reads v1: the same seed.
        let v2 = kp.serialize_der();
        let mut v1 = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        v1.extend_from_slice(&v2[16..48]);
        Signer::with(EncodingKey::from_ed_der(&v1), Algorithm::EdDSA, kid)
    }

    fn with(enc: EncodingKey, alg: Algorithm, kid: &str) -> Signer {
        let mut public = Jwk::from_encoding_key(&enc, alg).unwrap();
        public.common.key_id = Some(kid.to_owned());
        Signer {
            enc,
            alg,
            kid: kid.to_owned(),
            public,
        }
    }

    fn jwks(&self) -> Value {
        serde_json::to_value(JwkSet {
            keys: vec![self.public.clone()],
        })
        .unwrap()
    }

    fn sign(&self, claims: &Value) -> String {
        let mut h = Header::new(self.alg);
        h.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&h, claims, &self.enc).unwrap()
    }
}

/// Claims a well-behaved client sends: for this client, to our token endpoint, a minute.
fn claims(proxy: &TestProxy, client_id: &str) -> Value {
    let now = proxy.clock.now().0;
    json!({
        "iss": client_id,
        "sub": client_id,
        "aud": proxy.url("/token"),
        "iat": now,
        "exp": now + 60,
        "jti": crypto::random_token().unwrap(),
    })
}

fn assertion_fields(a: &str) -> [(&'static str, &str); 2] {
    [
        ("client_assertion_type", JWT_BEARER),
        ("client_assertion", a),
    ]
}

/// ChatGPT's document as it publishes it (singular method, a `jwks_uri` next to the
/// document), with this server's URLs.
fn chatgpt_document(server: &DocServer) -> Value {
    json!({
        "client_id": server.client_id(),
        "client_name": "ChatGPT",
        "client_uri": "https://chatgpt.example/",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "private_key_jwt",
        "jwks_uri": format!("{}{JWKS_PATH}", server.base),
    })
}

async fn dev_proxy() -> TestProxy {
    TestProxy::start_with(Options {
        extra_toml: DEV.to_owned(),
        ..Options::default()
    })
    .await
}

fn client(id: String) -> Client {
    Client {
        id,
        secret: None,
        redirect_uri: REDIRECT.to_owned(),
    }
}

/// A ChatGPT-style client with a code in hand, not yet redeemed.
struct Setup {
    proxy: TestProxy,
    server: DocServer,
    signer: Signer,
    client: Client,
    code: String,
    pkce: Pkce,
}

async fn setup() -> Setup {
    let proxy = dev_proxy().await;
    let server = DocServer::start().await;
    let signer = Signer::es256("chatgpt-1");
    server.serve_json(&chatgpt_document(&server), &[]);
    server.serve_json_at(
        JWKS_PATH,
        &signer.jwks(),
        &[("cache-control", "max-age=3600")],
    );
    let client = client(server.client_id());
    let pkce = Pkce::new();
    let code = client
        .get_code(&proxy, &Browser::new(), "alice", &pkce)
        .await;
    Setup {
        proxy,
        server,
        signer,
        client,
        code,
        pkce,
    }
}

impl Setup {
    async fn redeem_with(&self, assertion: &str) -> JsonResp {
        self.client
            .redeem(
                &self.proxy,
                &self.code,
                &self.pkce,
                &assertion_fields(assertion),
            )
            .await
    }

    /// The refusal every bad assertion gets, and nothing issued or consumed.
    async fn assert_refused(&self, r: &JsonResp, what: &str) {
        assert_eq!(
            (r.status, r.error()),
            (401, "invalid_client"),
            "{what}: {:?}",
            r.json
        );
        assert_eq!(
            r.json["error_description"], "client authentication failed",
            "{what}: no hint which check failed"
        );
        assert!(r.json.get("access_token").is_none());
        assert_eq!(self.proxy.count(Keyspace::AccessTokens).await, 0, "{what}");
        assert_eq!(
            self.proxy.count(Keyspace::RefreshFamilies).await,
            0,
            "{what}"
        );
        assert_eq!(
            self.proxy.count(Keyspace::UsedCodes).await,
            0,
            "{what}: code untouched"
        );
        assert_eq!(
            self.proxy.count(Keyspace::Codes).await,
            1,
            "{what}: code still there"
        );
    }
}

#[tokio::test]
async fn chatgpt_style_metadata_document_with_private_key_jwt_completes_the_flow() {
    let s = setup().await;
    let meta: Value = http()
        .get(s.proxy.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        meta["token_endpoint_auth_methods_supported"]
            .as_array()
            .unwrap()
            .contains(&"private_key_jwt".into())
    );
    assert_eq!(
        meta["token_endpoint_auth_signing_alg_values_supported"],
        json!(["ES256", "RS256", "EdDSA"])
    );

    // Without its assertion the client is not authenticated (the document chose the method).
    let bare = s.client.redeem(&s.proxy, &s.code, &s.pkce, &[]).await;
    s.assert_refused(&bare, "no assertion").await;

    let a = s.signer.sign(&claims(&s.proxy, &s.client.id));
    let tokens = s.redeem_with(&a).await;
    assert_eq!(tokens.status, 200, "{:?}", tokens.json);
    let refresh = tokens.json["refresh_token"].as_str().unwrap().to_owned();
    assert_eq!(s.proxy.count(Keyspace::UsedAssertions).await, 1);

    // Refresh and revoke authenticate the same way, each with a new assertion.
    let a2 = s.signer.sign(&claims(&s.proxy, &s.client.id));
    let refreshed = s
        .client
        .refresh(&s.proxy, &refresh, &assertion_fields(&a2))
        .await;
    assert_eq!(refreshed.status, 200, "{:?}", refreshed.json);
    let newest = refreshed.json["refresh_token"].as_str().unwrap().to_owned();
    let a3 = s.signer.sign(&claims(&s.proxy, &s.client.id));
    let revoked = http()
        .post(s.proxy.url("/revoke"))
        .form(&[
            ("client_id", s.client.id.as_str()),
            ("client_assertion_type", JWT_BEARER),
            ("client_assertion", a3.as_str()),
            ("token", newest.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status().as_u16(), 200);
    let a4 = s.signer.sign(&claims(&s.proxy, &s.client.id));
    let after = s
        .client
        .refresh(&s.proxy, &newest, &assertion_fields(&a4))
        .await;
    assert_eq!(
        (after.status, after.error()),
        (400, "invalid_grant"),
        "revoked"
    );
    assert_eq!(s.proxy.count(Keyspace::UsedAssertions).await, 4);
    // The key set was fetched once and served from the cache after (max-age=3600).
    assert_eq!(s.server.hits_at(JWKS_PATH), 1);
}

#[tokio::test]
async fn assertion_for_another_audience_is_refused() {
    let s = setup().await;
    let mut c = claims(&s.proxy, &s.client.id);
    c["aud"] = json!("https://other-server.example/token");
    let r = s.redeem_with(&s.signer.sign(&c)).await;
    s.assert_refused(&r, "wrong aud").await;
    assert_eq!(s.proxy.count(Keyspace::UsedAssertions).await, 0);
}

#[tokio::test]
async fn expired_assertion_is_refused() {
    let s = setup().await;
    let now = s.proxy.clock.now().0;
    let mut c = claims(&s.proxy, &s.client.id);
    c["iat"] = json!(now - 300);
    c["exp"] = json!(now - 120);
    let r = s.redeem_with(&s.signer.sign(&c)).await;
    s.assert_refused(&r, "expired").await;
    // Overlong lifetimes are refused too (exp − iat > 5 min).
    let mut c = claims(&s.proxy, &s.client.id);
    c["exp"] = json!(now + 3600);
    let r = s.redeem_with(&s.signer.sign(&c)).await;
    s.assert_refused(&r, "an hour long").await;
    assert_eq!(s.proxy.count(Keyspace::UsedAssertions).await, 0);
}

#[tokio::test]
async fn replayed_assertion_jti_is_refused() {
    let s = setup().await;
    let c0 = claims(&s.proxy, &s.client.id);
    let a = s.signer.sign(&c0);
    let first = s.redeem_with(&a).await;
    assert_eq!(first.status, 200, "{:?}", first.json);
    let refresh = first.json["refresh_token"].as_str().unwrap().to_owned();
    let family_before = s
        .proxy
        .app
        .store
        .scan_prefix(Keyspace::RefreshFamilies, "")
        .await
        .unwrap();
    // The same assertion again, for a refresh: refused, and the family is as it was.
    let again = s
        .client
        .refresh(&s.proxy, &refresh, &assertion_fields(&a))
        .await;
    assert_eq!(
        (again.status, again.error()),
        (401, "invalid_client"),
        "{:?}",
        again.json
    );
    assert!(again.json.get("access_token").is_none());
    assert_eq!(s.proxy.count(Keyspace::AccessTokens).await, 1);
    assert_eq!(
        s.proxy
            .app
            .store
            .scan_prefix(Keyspace::RefreshFamilies, "")
            .await
            .unwrap(),
        family_before
    );
    // A fresh assertion with the same jti but re-signed is the same jti.
    let mut c: Value = claims(&s.proxy, &s.client.id);
    c["jti"] = c0["jti"].clone();
    let resigned = s
        .client
        .refresh(&s.proxy, &refresh, &assertion_fields(&s.signer.sign(&c)))
        .await;
    assert_eq!((resigned.status, resigned.error()), (401, "invalid_client"));
    assert_eq!(s.proxy.count(Keyspace::AccessTokens).await, 1);
    assert_eq!(s.proxy.count(Keyspace::UsedAssertions).await, 1);
}

fn b64(v: &Value) -> String {
    crypto::b64url(v.to_string().as_bytes())
}

#[tokio::test]
async fn unsigned_alg_none_assertion_is_refused() {
    let s = setup().await;
    let c = claims(&s.proxy, &s.client.id);
    for alg in ["none", "None", "NONE"] {
        let unsigned = format!(
            "{}.{}.",
            b64(&json!({"alg": alg, "kid": s.signer.kid})),
            b64(&c)
        );
        let r = s.redeem_with(&unsigned).await;
        s.assert_refused(&r, alg).await;
    }
    assert_eq!(s.proxy.count(Keyspace::UsedAssertions).await, 0);
}

#[tokio::test]
async fn hmac_assertion_keyed_with_the_public_key_is_refused() {
    let s = setup().await;
    let c = claims(&s.proxy, &s.client.id);
    // The attacker knows the public key (it is published): as the JWK JSON, and as the
    // bare x coordinate, each used as an HMAC secret.
    let jwk_json = serde_json::to_vec(&s.signer.public).unwrap();
    let x = serde_json::to_value(&s.signer.public).unwrap()["x"]
        .as_str()
        .unwrap()
        .to_owned();
    for (alg, secret) in [
        (Algorithm::HS256, jwk_json.clone()),
        (Algorithm::HS384, jwk_json),
        (Algorithm::HS256, x.into_bytes()),
    ] {
        let mut h = Header::new(alg);
        h.kid = Some(s.signer.kid.clone());
        let forged =
            jsonwebtoken::encode(&h, &c, &EncodingKey::from_secret(&secret).unwrap()).unwrap();
        let r = s.redeem_with(&forged).await;
        s.assert_refused(&r, "hmac").await;
    }
    assert_eq!(s.proxy.count(Keyspace::UsedAssertions).await, 0);
}

#[tokio::test]
async fn assertion_with_unknown_kid_is_refused_after_one_refetch() {
    let s = setup().await;
    // A first, good redemption fetches the key set (cached for an hour).
    let ok = s
        .redeem_with(&s.signer.sign(&claims(&s.proxy, &s.client.id)))
        .await;
    assert_eq!(ok.status, 200, "{:?}", ok.json);
    assert_eq!(s.server.hits_at(JWKS_PATH), 1);
    let refresh = ok.json["refresh_token"].as_str().unwrap().to_owned();
    s.proxy.clock.advance(120);

    // Signed with a key the client never published.
    let stranger = Signer::es256("not-published");
    let tokens_before = s.proxy.count(Keyspace::AccessTokens).await;
    let r = s
        .client
        .refresh(
            &s.proxy,
            &refresh,
            &assertion_fields(&stranger.sign(&claims(&s.proxy, &s.client.id))),
        )
        .await;
    assert_eq!(
        (r.status, r.error()),
        (401, "invalid_client"),
        "{:?}",
        r.json
    );
    assert_eq!(
        s.server.hits_at(JWKS_PATH),
        2,
        "refetched once for the unknown kid"
    );
    // More unknown kids right after cannot make us fetch again.
    for i in 0..5 {
        let other = Signer::es256(&format!("made-up-{i}"));
        let r = s
            .client
            .refresh(
                &s.proxy,
                &refresh,
                &assertion_fields(&other.sign(&claims(&s.proxy, &s.client.id))),
            )
            .await;
        assert_eq!((r.status, r.error()), (401, "invalid_client"));
    }
    assert_eq!(s.server.hits_at(JWKS_PATH), 2, "refetch is rate-limited");
    assert_eq!(s.proxy.count(Keyspace::AccessTokens).await, tokens_before);

    // A real rotation: the new key is found by the one refetch its unknown kid earns.
    let rotated = Signer::es256("chatgpt-2");
    s.server.serve_json_at(
        JWKS_PATH,
        &rotated.jwks(),
        &[("cache-control", "max-age=3600")],
    );
    s.proxy.clock.advance(61);
    let r = s
        .client
        .refresh(
            &s.proxy,
            &refresh,
            &assertion_fields(&rotated.sign(&claims(&s.proxy, &s.client.id))),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(s.server.hits_at(JWKS_PATH), 3);
}

#[tokio::test]
async fn oversize_assertion_is_refused_before_parsing() {
    let s = setup().await;
    let mut c = claims(&s.proxy, &s.client.id);
    c["padding"] = json!("x".repeat(9 * 1024));
    let r = s.redeem_with(&s.signer.sign(&c)).await;
    s.assert_refused(&r, "oversize").await;
    assert_eq!(s.server.hits_at(JWKS_PATH), 0, "no key was even looked up");
    assert_eq!(s.proxy.count(Keyspace::UsedAssertions).await, 0);
}

#[tokio::test]
async fn jwks_uri_on_a_private_address_is_refused_without_connecting() {
    let proxy = dev_proxy().await;
    let signer = Signer::es256("k");
    // Cloud metadata, and a private range: never fetched, even with loopback allowed.
    for uri in [
        "https://169.254.169.254/latest/jwks.json",
        "http://10.0.0.7/jwks.json",
    ] {
        let server = DocServer::start().await;
        let mut doc = chatgpt_document(&server);
        doc["jwks_uri"] = json!(uri);
        server.serve_json(&doc, &[("cache-control", "no-store")]);
        let c = client(server.client_id());
        let pkce = Pkce::new();
        let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
        let r = c
            .redeem(
                &proxy,
                &code,
                &pkce,
                &assertion_fields(&signer.sign(&claims(&proxy, &c.id))),
            )
            .await;
        assert_eq!(
            (r.status, r.error()),
            (401, "invalid_client"),
            "{uri}: {:?}",
            r.json
        );
        assert_eq!(r.json["error_description"], "client authentication failed");
        assert_eq!(proxy.count(Keyspace::AccessTokens).await, 0);
        assert_eq!(proxy.count(Keyspace::RefreshFamilies).await, 0);
        assert_eq!(proxy.count(Keyspace::UsedAssertions).await, 0);
    }
}

#[tokio::test]
async fn metadata_document_listing_several_auth_methods_gets_one_we_support() {
    let proxy = dev_proxy().await;
    // Keys inline and a list of methods: private_key_jwt is chosen (it authenticates the
    // client), over none and a shared secret nobody issued.
    let server = DocServer::start().await;
    let signer = Signer::ed25519("ed-1");
    let mut doc = chatgpt_document(&server);
    doc.as_object_mut().unwrap().remove("jwks_uri");
    doc.as_object_mut()
        .unwrap()
        .remove("token_endpoint_auth_method");
    doc["token_endpoint_auth_methods_supported"] =
        json!(["client_secret_basic", "private_key_jwt", "none"]);
    doc["jwks"] = signer.jwks();
    server.serve_json(&doc, &[]);
    let c = client(server.client_id());
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    let bare = c.redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!((bare.status, bare.error()), (401, "invalid_client"));
    let r = c
        .redeem(
            &proxy,
            &code,
            &pkce,
            &assertion_fields(&signer.sign(&claims(&proxy, &c.id))),
        )
        .await;
    assert_eq!(r.status, 200, "EdDSA with inline keys: {:?}", r.json);

    // The same list without keys: none is the one we support.
    let plain = DocServer::start().await;
    let mut doc = plain.document("Lister", &[REDIRECT]);
    doc.as_object_mut()
        .unwrap()
        .remove("token_endpoint_auth_method");
    doc["token_endpoint_auth_methods_supported"] =
        json!(["client_secret_post", "private_key_jwt", "none"]);
    plain.serve_json(&doc, &[]);
    let c = client(plain.client_id());
    let tokens = c.tokens(&proxy, &Browser::new(), "alice").await;
    assert!(tokens.json["access_token"].as_str().is_some());

    // ChatGPT's singular form, with a list value where a document gives one.
    let listed = DocServer::start().await;
    let mut doc = listed.document("Singular list", &[REDIRECT]);
    doc["token_endpoint_auth_method"] = json!(["private_key_jwt", "none"]);
    listed.serve_json(&doc, &[]);
    let c = client(listed.client_id());
    let tokens = c.tokens(&proxy, &Browser::new(), "alice").await;
    assert!(tokens.json["access_token"].as_str().is_some());
}

#[tokio::test]
async fn preregistered_client_with_inline_jwks_authenticates_with_an_assertion() {
    let signer = Signer::es256("cfg-1");
    let proxy = TestProxy::start_with(Options {
        extra_toml: signed_client_toml(&signer),
        ..Options::default()
    })
    .await;
    let c = client("signed-cli".to_owned());
    let pkce = Pkce::new();
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    let bare = c.redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!((bare.status, bare.error()), (401, "invalid_client"));
    let r = c
        .redeem(
            &proxy,
            &code,
            &pkce,
            &assertion_fields(&signer.sign(&claims(&proxy, "signed-cli"))),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
}

/// A configured `private_key_jwt` client on both replicas.
fn signed_client_toml(signer: &Signer) -> String {
    format!(
        "[[clients]]\nclient_id = \"signed-cli\"\nclient_name = \"Signed CLI\"\nredirect_uris = [\"{REDIRECT}\"]\ntoken_endpoint_auth_method = \"private_key_jwt\"\njwks = '{}'\n",
        signer.jwks()
    )
}

#[tokio::test]
async fn assertion_used_on_one_replica_is_refused_on_the_other() {
    if !crate::support::postgres_available().await {
        return; // no PostgreSQL here (required in CI with MCP_PG=require)
    }
    let signer = Signer::es256("cfg-1");
    let a = TestProxy::start_with(Options {
        postgres: true,
        extra_toml: signed_client_toml(&signer),
        ..Options::default()
    })
    .await;
    let b = TestProxy::start_with(Options {
        replica_of: Some(a.replica.clone()),
        extra_toml: signed_client_toml(&signer),
        ..Options::default()
    })
    .await;
    let c = client("signed-cli".to_owned());
    let pkce = Pkce::new();
    let code = c.get_code(&a, &Browser::new(), "alice", &pkce).await;
    let used = signer.sign(&claims(&a, "signed-cli"));
    let r = c.redeem(&a, &code, &pkce, &assertion_fields(&used)).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let refresh = r.json["refresh_token"].as_str().unwrap().to_owned();
    let tokens_before = a.count(Keyspace::AccessTokens).await;

    // Replica B, directly: the same assertion is refused there; a new one works.
    let on_b = |assertion: String| {
        let url = format!("{}/token", b.own_base);
        let refresh = refresh.clone();
        async move {
            http()
                .post(url)
                .form(&[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", refresh.as_str()),
                    ("client_id", "signed-cli"),
                    ("client_assertion_type", JWT_BEARER),
                    ("client_assertion", assertion.as_str()),
                ])
                .send()
                .await
                .unwrap()
        }
    };
    let replayed = on_b(used.clone()).await;
    assert_eq!(replayed.status().as_u16(), 401);
    let body: Value = replayed.json().await.unwrap();
    assert_eq!(body["error"], "invalid_client");
    assert_eq!(a.count(Keyspace::AccessTokens).await, tokens_before);
    let fresh = on_b(signer.sign(&claims(&b, "signed-cli"))).await;
    assert_eq!(fresh.status().as_u16(), 200);
}
