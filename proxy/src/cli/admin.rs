//! `mcp-oauth-proxy admin …`: talks to a running proxy's admin API. Exit codes: 0 ok, 1
//! `audit verify` found problems, 2 the request was refused or failed, 64 usage.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use url::Url;

use crate::ids::AdminToken;
use crate::outbound::{self, AdminExchange};

/// Success.
pub const EXIT_OK: u8 = 0;
/// `audit verify` found inconsistencies.
pub const EXIT_PROBLEMS: u8 = 1;
/// The proxy refused the request, or could not be reached.
pub const EXIT_REFUSED: u8 = 2;
/// Bad command line or environment (sysexits EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// `admin` arguments.
#[derive(Args, Debug)]
pub struct AdminArgs {
    /// The proxy's admin listener.
    #[arg(long, default_value = "http://127.0.0.1:9090")]
    pub url: String,
    /// Environment variable holding the admin token (`[admin] token`).
    #[arg(long, default_value = "MCP_ADMIN_TOKEN")]
    pub token_env: String,
    /// What to do.
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// Admin commands.
#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Registered MCP clients.
    #[command(subcommand)]
    Clients(ClientsCommand),
    /// People's consents.
    #[command(subcommand)]
    Consents(ConsentsCommand),
    /// People's GitHub grants.
    #[command(subcommand)]
    Grants(GrantsCommand),
    /// The audit trail.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// The tool-call policy (`[[policy]]`).
    #[command(subcommand)]
    Policy(PolicyCommand),
}

/// `admin policy …`
#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// The newest policy decisions and approval answers, one JSON object per line.
    Decisions {
        /// How many.
        #[arg(short = 'n', default_value_t = 50)]
        n: usize,
        /// Only this person's (`github:<id>`).
        #[arg(long)]
        user: Option<String>,
        /// Only this client's.
        #[arg(long)]
        client: Option<String>,
    },
    /// The rules in force now (after the last valid SIGHUP reload).
    Show,
}

/// `admin clients …`
#[derive(Subcommand, Debug)]
pub enum ClientsCommand {
    /// List every client.
    List,
    /// Show one client.
    Show {
        /// Client id.
        id: String,
    },
    /// Delete a client, its consents and its tokens.
    Delete {
        /// Client id.
        id: String,
    },
    /// Lift the block a delete put on a metadata-document (URL) client.
    Unblock {
        /// Client id (the document's URL).
        id: String,
    },
}

/// `admin consents …`
#[derive(Subcommand, Debug)]
pub enum ConsentsCommand {
    /// A person's consents.
    List {
        /// User id (`github:<id>`).
        #[arg(long)]
        user: String,
    },
    /// Revoke a person's consent for a client, and the client's tokens for them.
    Revoke {
        /// User id.
        #[arg(long)]
        user: String,
        /// Client id.
        #[arg(long)]
        client: String,
    },
}

/// `admin grants …`
#[derive(Subcommand, Debug)]
pub enum GrantsCommand {
    /// Forget a person's GitHub grant and revoke all their proxy tokens.
    Revoke {
        /// User id.
        #[arg(long)]
        user: String,
    },
}

/// `admin audit …`
#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// The newest events, one JSON object per line.
    Tail {
        /// How many.
        #[arg(short = 'n', default_value_t = 50)]
        n: usize,
    },
    /// Join the trail (codes to consents, tokens to codes or refreshes); exit 1 on problems.
    Verify,
    /// The whole trail as JSON lines.
    Export,
}

/// What to send.
enum Call {
    Get(Vec<String>, Vec<(&'static str, String)>),
    Delete(Vec<String>),
    Post(Vec<String>, Value),
}

/// How to print the answer.
enum Print {
    Pretty,
    Lines,
    Raw,
    Verify,
}

fn seg(parts: &[&str]) -> Vec<String> {
    ["admin", "api"]
        .iter()
        .chain(parts.iter())
        .map(|s| (*s).to_owned())
        .collect()
}

fn plan(cmd: &AdminCommand) -> (Call, Print) {
    match cmd {
        AdminCommand::Clients(ClientsCommand::List) => {
            (Call::Get(seg(&["clients"]), Vec::new()), Print::Pretty)
        }
        AdminCommand::Clients(ClientsCommand::Show { id }) => {
            (Call::Get(seg(&["clients", id]), Vec::new()), Print::Pretty)
        }
        AdminCommand::Clients(ClientsCommand::Delete { id }) => {
            (Call::Delete(seg(&["clients", id])), Print::Pretty)
        }
        AdminCommand::Clients(ClientsCommand::Unblock { id }) => (
            Call::Post(seg(&["clients", id, "unblock"]), json!({})),
            Print::Pretty,
        ),
        AdminCommand::Consents(ConsentsCommand::List { user }) => (
            Call::Get(seg(&["consents"]), vec![("user", user.clone())]),
            Print::Pretty,
        ),
        AdminCommand::Consents(ConsentsCommand::Revoke { user, client }) => (
            Call::Post(
                seg(&["consents", "revoke"]),
                json!({"user": user, "client": client}),
            ),
            Print::Pretty,
        ),
        AdminCommand::Grants(GrantsCommand::Revoke { user }) => (
            Call::Post(seg(&["grants", "revoke"]), json!({"user": user})),
            Print::Pretty,
        ),
        AdminCommand::Audit(AuditCommand::Tail { n }) => (
            Call::Get(seg(&["audit", "tail"]), vec![("limit", n.to_string())]),
            Print::Lines,
        ),
        AdminCommand::Audit(AuditCommand::Verify) => (
            Call::Get(seg(&["audit", "verify"]), Vec::new()),
            Print::Verify,
        ),
        AdminCommand::Policy(PolicyCommand::Decisions { n, user, client }) => {
            let mut q = vec![("limit", n.to_string())];
            q.extend(user.clone().map(|u| ("user", u)));
            q.extend(client.clone().map(|c| ("client", c)));
            (Call::Get(seg(&["policy", "decisions"]), q), Print::Lines)
        }
        AdminCommand::Audit(AuditCommand::Export) => {
            (Call::Get(seg(&["audit", "export"]), Vec::new()), Print::Raw)
        }
        AdminCommand::Policy(PolicyCommand::Show) => {
            (Call::Get(seg(&["policy"]), Vec::new()), Print::Pretty)
        }
    }
}

/// `base` + path segments (each percent-encoded, so an id cannot change the path).
fn endpoint(base: &Url, segments: &[String]) -> Result<Url, String> {
    let mut url = base.clone();
    url.path_segments_mut()
        .map_err(|()| "--url cannot be a base URL".to_owned())?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

/// `--url`, checked: the admin token must not cross a network in clear text, so plain http
/// is only for a loopback host.
fn admin_url(raw: &str) -> Result<Url, &'static str> {
    match Url::parse(raw) {
        Ok(u) if u.scheme() == "https" => Ok(u),
        Ok(u)
            if u.scheme() == "http"
                && crate::bindings::redirect::is_loopback_host(
                    u.host_str().unwrap_or_default(),
                ) =>
        {
            Ok(u)
        }
        Ok(u) if u.scheme() == "http" => Err(
            "--url: plain http only to a loopback address (the admin token would travel in clear text); use https",
        ),
        _ => Err("--url must be an http(s) URL, e.g. http://127.0.0.1:9090"),
    }
}

/// Runs `admin`: parses nothing more, calls the API, prints, returns the exit code.
pub fn main(args: AdminArgs) -> ExitCode {
    let base = match admin_url(&args.url) {
        Ok(u) => u,
        Err(msg) => {
            eprintln!("error: {msg}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let token = match std::env::var(&args.token_env) {
        Ok(t) if !t.trim().is_empty() => AdminToken::new(t.trim()),
        _ => {
            eprintln!(
                "error: set {} to the admin token ([admin] token in the proxy's config)",
                args.token_env
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (call, print) = plan(&args.command);
    if matches!(print, Print::Raw) {
        // `audit export`: copied to stdout as it arrives, never held whole.
        return match rt.block_on(stream_to_stdout(&base, &token, call)) {
            Ok(()) => ExitCode::from(EXIT_OK),
            Err(msg) => {
                eprintln!("error: {msg}");
                ExitCode::from(EXIT_REFUSED)
            }
        };
    }
    match rt.block_on(send(&base, &token, call)) {
        Ok(body) => ExitCode::from(output(&body, &print)),
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::from(EXIT_REFUSED)
        }
    }
}

/// Sends `call` and copies the answer's body to stdout chunk by chunk (a long export is
/// bounded by the time between chunks, not in total).
async fn stream_to_stdout(base: &Url, token: &AdminToken, call: Call) -> Result<(), String> {
    use std::io::Write;
    let mut resp = request(base, token, call, false).await?;
    let mut out = std::io::stdout();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("the transfer broke off: {e}"))?
    {
        out.write_all(&chunk).map_err(|e| e.to_string())?;
    }
    out.flush().map_err(|e| e.to_string())
}

async fn send(base: &Url, token: &AdminToken, call: Call) -> Result<String, String> {
    request(base, token, call, true)
        .await?
        .text()
        .await
        .map_err(|e| e.to_string())
}

/// Sends `call`; the response if it succeeded, else the proxy's reason. `bounded`: the whole
/// exchange within 60 s, else only each read (a streamed export may take longer).
async fn request(
    base: &Url,
    token: &AdminToken,
    call: Call,
    bounded: bool,
) -> Result<reqwest::Response, String> {
    // No proxy from the environment: the request carries the admin token, and a proxy set
    // for other traffic (HTTP_PROXY) would see it (`outbound::admin_cli`).
    let exchange = if bounded {
        AdminExchange::Bounded
    } else {
        AdminExchange::Streamed
    };
    let http = outbound::admin_cli(exchange).map_err(|e| e.to_string())?;
    let req = match call {
        Call::Get(path, query) => {
            let mut url = endpoint(base, &path)?;
            for (k, v) in query {
                url.query_pairs_mut().append_pair(k, &v);
            }
            http.get(url)
        }
        Call::Delete(path) => http.delete(endpoint(base, &path)?),
        Call::Post(path, body) => http.post(endpoint(base, &path)?).json(&body),
    };
    let resp = req
        .bearer_auth(token.secret())
        .send()
        .await
        .map_err(|e| format!("cannot reach {base}: {e}"))?;
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let text = resp.text().await.map_err(|e| e.to_string())?;
    let detail = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["error_description"].as_str().map(str::to_owned))
        .unwrap_or(text);
    Err(format!("refused ({status}): {detail}"))
}

fn output(body: &str, print: &Print) -> u8 {
    match print {
        Print::Raw => {
            print!("{body}");
            EXIT_OK
        }
        Print::Pretty | Print::Lines | Print::Verify => {
            let Ok(v) = serde_json::from_str::<Value>(body) else {
                eprintln!("error: the proxy answered something other than JSON");
                return EXIT_REFUSED;
            };
            match print {
                Print::Lines => {
                    for item in v.as_array().into_iter().flatten() {
                        println!("{item}");
                    }
                }
                _ => println!(
                    "{}",
                    serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
                ),
            }
            if matches!(print, Print::Verify)
                && v["problems"].as_array().is_none_or(|p| !p.is_empty())
            {
                return EXIT_PROBLEMS;
            }
            EXIT_OK
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_one_encoded_path_segment() {
        let base = Url::parse("http://127.0.0.1:9090/").unwrap();
        let u = endpoint(&base, &seg(&["clients", "../x?y"])).unwrap();
        assert_eq!(
            u.as_str(),
            "http://127.0.0.1:9090/admin/api/clients/..%2Fx%3Fy"
        );
    }

    #[test]
    fn plain_http_is_only_for_loopback() {
        for ok in [
            "http://127.0.0.1:9090",
            "http://localhost:9090",
            "http://[::1]:9090",
            "https://admin.example.com",
        ] {
            assert!(admin_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://example.com:9090",
            "http://10.0.0.5:9090",
            "ftp://127.0.0.1",
            "nope",
        ] {
            assert!(admin_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn verify_exit_code_follows_the_report() {
        assert_eq!(output(r#"{"problems":[]}"#, &Print::Verify), EXIT_OK);
        assert_eq!(
            output(r#"{"problems":["x"]}"#, &Print::Verify),
            EXIT_PROBLEMS
        );
        assert_eq!(output("not json", &Print::Pretty), EXIT_REFUSED);
    }
}
