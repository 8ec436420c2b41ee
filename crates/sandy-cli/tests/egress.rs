#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The network allowlist through Sandy's egress proxy, through the real binary, judged
//! from outside: what reached the test servers (their own request log), the `--net-log`
//! lines, and the answers the sandboxed clients got.
//!
//! Every test makes its own network and mount namespace (`unshare -n -m`, so it needs
//! root), the test's "host": the "internet" is a second namespace behind a veth pair
//! ([`internet_namespace`]), with addresses on its loopback (198.51.100.7 and .8 stand
//! for public hosts; 10.0.0.5 and 169.254.169.254 for a private host and the cloud
//! metadata service); the host's own addresses are its loopback and 192.0.2.1, its side
//! of the pair. Names come from a hosts file bind-mounted over `/etc/hosts` in that mount
//! namespace, and the servers are `helpers/egress_server.py`. Sandy runs on the test's
//! host, as root and as the unprivileged user; nothing listens on an outside address.
#![allow(clippy::disallowed_methods)] // the tests set up and judge worlds of their own

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// A refusal must arrive well within this (seconds).
const FAST: f64 = 2.0;
const PROXY_PORT: u16 = 3128;

const HOSTS: &str = "127.0.0.1 localhost
::1 localhost
198.51.100.7 api.stand-in.test www.allowed.test xn--bcher-kva.allowed.test evil.stand-in.test
198.51.100.8 other.test
10.0.0.5 rebind.allowed.test
169.254.169.254 meta.allowed.test
192.0.2.1 self.allowed.test
";

/// The servers every test network's internet has (HTTP, one UDP listener, and listeners
/// that log the first bytes each connection sends).
const SERVERS: &[&str] = &[
    "198.51.100.7:80",
    "198.51.100.7:8443",
    "198.51.100.8:80",
    "10.0.0.5:80",
    "169.254.169.254:80",
    "198.51.100.7:5353/udp",
    "198.51.100.7:443/raw",
    "198.51.100.7:9443/raw",
];

/// The servers on the test's host itself: a service on its loopback, for local-port
/// grants, and one on its own (public-looking) address.
const HOST_SERVERS: &[&str] = &["127.0.0.1:18080", "192.0.2.1:80", "192.0.2.1:8080"];

/// The internet's addresses.
const INTERNET: &[&str] = &[
    "198.51.100.7",
    "198.51.100.8",
    "10.0.0.5",
    "169.254.169.254",
];

fn ready() -> bool {
    own_network_ready("egress")
}

/// A test network around one world.
struct Net<'a> {
    w: &'a World,
    dir: PathBuf,
}

impl<'a> Net<'a> {
    fn new(w: &'a World) -> Net<'a> {
        let dir = w.root.join("net");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hosts"), HOSTS).unwrap();
        std::fs::write(dir.join("server.py"), helper_text("egress_server.py")).unwrap();
        std::fs::write(dir.join("requests.log"), "").unwrap();
        w.write("home/project/client.py", &helper_text("egress_client.py"));
        Net { w, dir }
    }

    /// Runs `sandy run FLAGS -- /bin/sh inner.sh` (INNER written into the project) in the
    /// test network as the test user, with `outside` running meanwhile as root in the
    /// same (host-side) namespace. `setup` runs before Sandy starts.
    fn run(
        &self,
        flags: &[&str],
        env: &[(&str, &str)],
        inner: &str,
        setup: &str,
        outside: &str,
    ) -> (String, String) {
        self.run_inner(flags, env, inner, setup, outside, "")
    }

    fn run_with_prefix(
        &self,
        flags: &[&str],
        env: &[(&str, &str)],
        inner: &str,
        setup: &str,
        prefix: &str,
    ) -> (String, String) {
        self.run_inner(flags, env, inner, setup, "", prefix)
    }

    fn run_inner(
        &self,
        flags: &[&str],
        env: &[(&str, &str)],
        inner: &str,
        setup: &str,
        outside: &str,
        prefix: &str,
    ) -> (String, String) {
        let w = self.w;
        w.write("home/project/inner.sh", inner);
        let d = self.dir.display();
        let servers = SERVERS.join(" ");
        let mut envs: Vec<String> = w
            .base_env()
            .into_iter()
            .map(|(k, v)| format!("{k}={}", shell_quote(&v)))
            .collect();
        envs.extend(env.iter().map(|(k, v)| format!("{k}={}", shell_quote(v))));
        let flags: Vec<String> = flags.iter().map(|f| shell_quote(f)).collect();
        let script = format!(
            "set -u
ip link set lo up
{internet}mount --bind {d}/hosts /etc/hosts
nsenter -t $INET -n /usr/bin/python3 {d}/server.py {d}/requests.log {d}/ready {servers} >/dev/null 2>&1 &
/usr/bin/python3 {d}/server.py {d}/requests.log {d}/ready-host {host_servers} >/dev/null 2>&1 &
i=0; while [ ! -e {d}/ready ] || [ ! -e {d}/ready-host ]; do [ $i -lt 200 ] || break; sleep 0.05; i=$((i+1)); done
{setup}
cd {project}
{user}env -i {envs} {prefix}{sandy} run {flags} -- /bin/sh inner.sh &
SANDY=$!
{outside}
wait $SANDY
echo sandy_exit=$?
kill $(jobs -p) $INET 2>/dev/null
",
            project = w.project.display(),
            user = w.setpriv_prefix(),
            envs = envs.join(" "),
            sandy = sandy_bin().display(),
            flags = flags.join(" "),
            internet = internet_namespace(INTERNET),
            host_servers = HOST_SERVERS.join(" "),
        );
        let cmd = in_own_network(&script);
        let o = run_timeout(cmd, 180);
        (stdout(&o), stderr(&o))
    }

    fn requests(&self) -> String {
        std::fs::read_to_string(self.dir.join("requests.log")).unwrap()
    }
}

/// `KEY=CODE TIME` as printed by the inner scripts' `c` function.
fn code_and_time<'o>(out: &'o str, key: &str, context: &str) -> (&'o str, f64) {
    let v = field(out, key).unwrap_or_else(|| panic!("{key} missing\n{context}"));
    let mut parts = v.split_whitespace();
    let code = parts.next().unwrap_or("");
    let time = parts
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or(f64::MAX);
    (code, time)
}

/// The inner scripts' helpers: `c KEY CURL-ARGS...` prints `KEY=HTTP/CONNECT TIME`.
const CURL_FN: &str = "c() { k=$1; shift; curl -sS -o /dev/null -m 10 -w \"$k=%{http_code}/%{http_connect} %{time_total}\\n\" \"$@\" 2>/dev/null; }\n";

#[test]
fn an_allowlist_reaches_exactly_the_named_hosts_and_refuses_the_rest_at_once() {
    if !ready() {
        return;
    }
    for_each_user(|w| {
        let net = Net::new(w);
        let log = w.root.join("net.jsonl");
        let inner = format!(
            "{CURL_FN}\
env | grep -E '^(HTTP_PROXY|https_proxy|ALL_PROXY|NO_PROXY)=' | sort
c plain http://API.Stand-In.TEST./allowed-plain
c connect -p http://api.stand-in.test/allowed-connect
c wildcard http://www.allowed.test/allowed-wildcard
c port -p http://api.stand-in.test:8443/denied-port
c other http://other.test/denied-other
echo header=$(curl -sS -D - -o /dev/null http://other.test/denied-header | tr -d '\\r' | grep -i '^x-sandy-denied:')
c rebind http://rebind.allowed.test/denied-rebind
c meta_name http://meta.allowed.test/denied-meta-name
c meta_literal http://169.254.169.254/denied-meta-literal
c meta_mapped 'http://[::ffff:169.254.169.254]/denied-meta-mapped'
c literal http://198.51.100.7/denied-literal
c socks_remote --proxy socks5h://127.0.0.1:{PROXY_PORT} http://www.allowed.test/allowed-socks
curl -sS -m 10 -o /dev/null --proxy socks5://127.0.0.1:{PROXY_PORT} http://api.stand-in.test/denied-socks-local 2>/dev/null; echo socks_local=$?
echo idna=$(/usr/bin/python3 client.py {PROXY_PORT} http 'http://BÜCHER.allowed.test/allowed-idna')
echo userinfo=$(/usr/bin/python3 client.py {PROXY_PORT} http 'http://user@api.stand-in.test/denied-userinfo')
echo socks_literal=$(/usr/bin/python3 client.py {PROXY_PORT} socks4a 198.51.100.7 80)
echo socks_meta=$(/usr/bin/python3 client.py {PROXY_PORT} socksname meta.allowed.test 80)
c direct --noproxy '*' http://198.51.100.7/denied-direct
/usr/bin/python3 -c \"
import socket, time
t = time.time()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b'denied-udp', ('198.51.100.7', 5353)); print('udp=sent', time.time() - t)
except OSError as e:
    print('udp=error', time.time() - t)
\"
t0=$(date +%s%N); getent hosts leak.example.com >/dev/null; r=$?; t1=$(date +%s%N)
echo dns=$r $(( (t1 - t0) / 1000000 ))
sleep 2
"
        );
        // Meanwhile, outside the sandbox: a host process and a second local user try the
        // proxy's port; nothing on the host side listens on it.
        let second = if w.user.uid == 0 {
            (65533, 65533)
        } else {
            (0, 0)
        };
        let outside = format!(
            "sleep 1.5
curl -sS -m 3 -o /dev/null -x http://127.0.0.1:{PROXY_PORT} http://api.stand-in.test/denied-host-process 2>/dev/null; echo host_process=$?
{other}curl -sS -m 3 -o /dev/null -x http://127.0.0.1:{PROXY_PORT} http://api.stand-in.test/denied-second-user 2>/dev/null; echo second_user=$?
echo host_listeners=$(ss -Hltn | grep -c ':{PROXY_PORT} ')
",
            other = setpriv_prefix(second.0, second.1),
        );
        // -v: the allowed destinations are in the summary too.
        let (out, err) = net.run(
            &[
                "-v",
                "--allow-domain",
                "api.stand-in.test",
                "--allow-domain",
                "*.allowed.test",
                "--net-log",
                log.to_str().unwrap(),
            ],
            &[("HTTP_PROXY", "http://corp-proxy.invalid:8080")],
            &inner,
            "",
            &outside,
        );
        let requests = net.requests();
        let context = format!(
            "[{}]\nstdout:\n{out}\nstderr:\n{err}\nserver log:\n{requests}",
            w.user.label
        );
        assert_eq!(field(&out, "sandy_exit"), Some("0"), "{context}");
        // The variables point at the proxy (the caller's proxy setting replaced).
        for line in [
            "HTTP_PROXY=http://127.0.0.1:3128",
            "https_proxy=http://127.0.0.1:3128",
            "ALL_PROXY=socks5h://127.0.0.1:3128",
            "NO_PROXY=localhost,127.0.0.1,::1",
        ] {
            assert!(out.lines().any(|l| l == line), "{line}\n{context}");
        }
        // Allowed: by name, case and trailing dot folded, through plain HTTP, CONNECT,
        // SOCKS with remote names and an IDNA name, each reaching the server.
        for key in ["plain", "wildcard", "socks_remote"] {
            assert_eq!(
                code_and_time(&out, key, &context).0,
                "200/000",
                "{key}\n{context}"
            );
        }
        assert_eq!(
            code_and_time(&out, "connect", &context).0,
            "200/200",
            "{context}"
        );
        assert!(
            field(&out, "idna")
                .unwrap_or("")
                .starts_with("HTTP/1.1 200"),
            "{context}"
        );
        for path in [
            "/allowed-plain",
            "/allowed-connect",
            "/allowed-wildcard",
            "/allowed-socks",
            "/allowed-idna",
        ] {
            assert!(requests.contains(path), "{path} did not arrive\n{context}");
        }
        // Refused, at once, with the reason: another host, a non-allowed port, rebinding,
        // metadata and other IP literals (also IPv4-mapped).
        assert!(
            code_and_time(&out, "port", &context).0.ends_with("/403"),
            "{context}"
        );
        for key in [
            "other",
            "rebind",
            "meta_name",
            "meta_literal",
            "meta_mapped",
            "literal",
        ] {
            let (code, time) = code_and_time(&out, key, &context);
            assert_eq!(code, "403/000", "{key}\n{context}");
            assert!(time < FAST, "{key} took {time} s\n{context}");
        }
        assert_eq!(
            field(&out, "header"),
            Some("X-Sandy-Denied: other.test:80; allow with --allow-domain other.test"),
            "{context}"
        );
        assert!(
            field(&out, "userinfo")
                .unwrap_or("")
                .starts_with("HTTP/1.1 400"),
            "{context}"
        );
        // SOCKS: a literal address (what a client resolving names itself sends) and a name
        // resolving to the metadata address get "not allowed by ruleset" (2).
        assert_eq!(
            field(&out, "socks_literal"),
            Some("socks-reply 2"),
            "{context}"
        );
        assert_eq!(
            field(&out, "socks_meta"),
            Some("socks-reply 2"),
            "{context}"
        );
        assert_eq!(field(&out, "socks_local"), Some("97"), "{context}");
        // Traffic that ignores the proxy reaches nothing and fails at once.
        let (code, time) = code_and_time(&out, "direct", &context);
        assert_eq!(code, "000/000", "{context}");
        assert!(time < FAST, "direct took {time} s\n{context}");
        assert!(
            field(&out, "udp").unwrap_or("").starts_with("error"),
            "{context}"
        );
        let dns = field(&out, "dns").unwrap_or("");
        let dns_ms: u64 = dns
            .split_whitespace()
            .nth(1)
            .unwrap_or("99999")
            .parse()
            .unwrap();
        assert!(
            !dns.starts_with("0 ") && dns_ms < 2000,
            "dns {dns}\n{context}"
        );
        // Nothing refused reached any server.
        assert!(!requests.contains("denied"), "{context}");
        // Outside the sandbox the proxy does not exist: neither a host process nor a second
        // user can connect (curl 7: connection refused), and no host listener has its port.
        assert_eq!(field(&out, "host_process"), Some("7"), "{context}");
        assert_eq!(field(&out, "second_user"), Some("7"), "{context}");
        assert_eq!(field(&out, "host_listeners"), Some("0"), "{context}");
        // The log: one JSON line per decision, with the rule and the bytes.
        let lines: Vec<Value> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let find = |host: &str, decision: &str| {
            lines
                .iter()
                .find(|l| l["host"] == host && l["decision"] == decision)
                .unwrap_or_else(|| panic!("no {decision} line for {host}\n{lines:#?}\n{context}"))
        };
        let api = find("api.stand-in.test", "allow");
        assert_eq!(api["rule"], "--allow-domain api.stand-in.test", "{context}");
        assert!(api["bytes_down"].as_u64().unwrap() > 0, "{context}");
        assert!(api["bytes_up"].as_u64().unwrap() > 0, "{context}");
        assert!(api["time"].as_str().unwrap().ends_with('Z'), "{context}");
        find("xn--bcher-kva.allowed.test", "allow");
        let other = find("other.test", "deny");
        assert_eq!(other["port"], 80, "{context}");
        assert!(other["reason"]
            .as_str()
            .unwrap()
            .contains("--allow-domain other.test"));
        find("rebind.allowed.test", "deny");
        // The summary on stderr: allowed with counts, refused with the flag.
        assert!(err.contains("sandy: network: allowed "), "{context}");
        assert!(
            err.contains("sandy: network: refused other.test:80 2 times; allow with --allow-domain other.test"),
            "{context}"
        );
        // A private address an allowed name resolved to: the rule and where opening it is
        // documented, never the flag that would open it.
        assert!(
            err.contains(
                "refused rebind.allowed.test:80 once: rebind.allowed.test resolves to 10.0.0.5, \
                 a private network address, refused unless a rule names the address; \
                 --allow-domain *.allowed.test allows the name, not the address (see \"Local, \
                 private and metadata addresses\" in Sandy's docs/network.md)"
            ),
            "{context}"
        );
        assert!(!err.contains("--allow-domain 10.0.0.5"), "{context}");
        assert!(!err.contains("--allow-domain 169.254"), "{context}");
    });
}

#[test]
fn rules_naming_an_address_or_port_allow_exactly_that_and_deny_wins() {
    if !ready() {
        return;
    }
    for_each_user(|w| {
        let net = Net::new(w);
        let inner = format!(
            "{CURL_FN}\
c private http://10.0.0.5/allowed-private
c private_name http://rebind.allowed.test/allowed-private-name
c port -p http://api.stand-in.test:8443/allowed-port
c port_80 http://api.stand-in.test/denied-port-80
c denied http://www.allowed.test/denied-by-rule
c allowed http://xn--bcher-kva.allowed.test/allowed-wildcard
c local http://127.0.0.1:18080/allowed-local
c local_direct --noproxy '*' http://127.0.0.1:18080/allowed-local-direct
c local_other --noproxy '*' http://127.0.0.1:18081/denied-local-other
c local_proxy --noproxy '' http://127.0.0.1:18080/denied-local-through-proxy
"
        );
        let (out, err) = net.run(
            &[
                "--allow-domain",
                "10.0.0.5",
                "--allow-domain",
                "*.allowed.test",
                "--allow-domain",
                "API.stand-in.test:8443",
                "--deny-domain",
                "www.allowed.test",
                "--allow-local-port",
                "18080",
            ],
            &[],
            &inner,
            "",
            "",
        );
        let requests = net.requests();
        let context = format!("[{}]\n{out}\n{err}\n{requests}", w.user.label);
        assert_eq!(
            code_and_time(&out, "private", &context).0,
            "200/000",
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "private_name", &context).0,
            "200/000",
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "port", &context).0,
            "200/200",
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "port_80", &context).0,
            "403/000",
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "denied", &context).0,
            "403/000",
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "allowed", &context).0,
            "200/000",
            "{context}"
        );
        // A local-port grant works alongside: loopback stays direct (NO_PROXY), through
        // the supervisor's relay, and only the granted port; the proxy itself does not
        // reach the host's loopback.
        assert_eq!(
            code_and_time(&out, "local", &context).0,
            "200/000",
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "local_direct", &context).0,
            "200/000",
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "local_other", &context).0,
            "000/000",
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "local_proxy", &context).0,
            "403/000",
            "{context}"
        );
        assert!(!requests.contains("denied"), "{context}");
        assert!(requests.contains("/allowed-port"), "{context}");
        assert!(requests.contains("/allowed-local-direct"), "{context}");
    });
}

#[test]
fn the_hosts_own_addresses_deny_rules_on_every_port_and_tls_names_are_enforced() {
    if !ready() {
        return;
    }
    for_each_user(|w| {
        let net = Net::new(w);
        let log = w.root.join("net.jsonl");
        let p = PROXY_PORT;
        let inner = format!(
            "{CURL_FN}\
hdr() {{ curl -sS -D - -o /dev/null \"$@\" 2>/dev/null | tr -d '\\r' | grep -i '^x-sandy-denied:'; }}
c self http://self.allowed.test/denied-self
echo self_header=$(hdr http://self.allowed.test/denied-self-header)
c self_literal http://192.0.2.1/denied-self-literal
echo self_literal_header=$(hdr http://192.0.2.1/denied-self-literal-header)
c self_named http://192.0.2.1:8080/allowed-self-named
echo meta_header=$(hdr http://169.254.169.254/denied-meta-header)
echo local_header=$(hdr --noproxy '' http://localhost:18080/denied-localhost)
c deny_port -p http://evil.stand-in.test:8443/denied-deny-port
c deny_80 http://evil.stand-in.test/denied-deny-80
c allow_port -p http://api.stand-in.test:8443/allowed-port
echo tls_good=$(/usr/bin/python3 client.py {p} tls api.stand-in.test:443 API.Stand-In.test.)
echo tls_other=$(/usr/bin/python3 client.py {p} tls api.stand-in.test:443 www.allowed.test)
echo tls_evil=$(/usr/bin/python3 client.py {p} tls api.stand-in.test:443 evil.example)
echo tls_none=$(/usr/bin/python3 client.py {p} tls api.stand-in.test:443 -)
echo plain_443=$(/usr/bin/python3 client.py {p} bytes api.stand-in.test:443 'GET /denied-plain-443 HTTP/1.1')
echo silent_443=$(/usr/bin/python3 client.py {p} silent api.stand-in.test:443)
echo socks_evil=$(/usr/bin/python3 client.py {p} sockstls api.stand-in.test 443 evil.example)
echo socks_good=$(/usr/bin/python3 client.py {p} sockstls api.stand-in.test 443 api.stand-in.test)
echo other_port_bytes=$(/usr/bin/python3 client.py {p} bytes api.stand-in.test:9443 hello-other-port)
echo other_port_evil=$(/usr/bin/python3 client.py {p} tls api.stand-in.test:9443 evil.example)
sleep 3.5
"
        );
        let (out, err) = net.run(
            &[
                "--allow-domain",
                "*.allowed.test",
                "--allow-domain",
                "api.stand-in.test",
                "--allow-domain",
                "api.stand-in.test:9443",
                "--allow-domain",
                "*.stand-in.test:8443",
                "--allow-domain",
                "192.0.2.1:8080",
                "--allow-domain",
                "localhost",
                "--deny-domain",
                "evil.stand-in.test",
                "--net-log",
                log.to_str().unwrap(),
            ],
            &[],
            &inner,
            "",
            "",
        );
        let requests = net.requests();
        let context = format!(
            "[{}]\nstdout:\n{out}\nstderr:\n{err}\nserver log:\n{requests}",
            w.user.label
        );
        assert_eq!(field(&out, "sandy_exit"), Some("0"), "{context}");
        // Item 2: a name allowed by a rule that resolves to one of the host's own
        // addresses is refused like loopback; so is the literal; a rule naming the address
        // opens it (on its port).
        for key in ["self", "self_literal"] {
            let (code, time) = code_and_time(&out, key, &context);
            assert_eq!(code, "403/000", "{key}\n{context}");
            assert!(time < FAST, "{key} took {time}\n{context}");
        }
        assert_eq!(
            code_and_time(&out, "self_named", &context).0,
            "200/000",
            "{context}"
        );
        assert!(
            requests.contains("192.0.2.1:8080 GET /allowed-self-named"),
            "{context}"
        );
        // Item 6: those refusals, metadata and localhost name no flag that would open them.
        let self_header = field(&out, "self_header").unwrap_or("");
        assert!(
            self_header.contains("resolves to 192.0.2.1, one of this host's own addresses")
                && self_header.contains("--allow-domain *.allowed.test allows the name"),
            "{context}"
        );
        for key in [
            "self_header",
            "self_literal_header",
            "meta_header",
            "local_header",
        ] {
            let h = field(&out, key).unwrap_or("");
            assert!(h.starts_with("X-Sandy-Denied:"), "{key}\n{context}");
            assert!(!h.contains("allow with"), "{key}\n{context}");
            assert!(
                h.contains("Local, private and metadata addresses"),
                "{key}\n{context}"
            );
        }
        // Item 3: the deny rule without a port wins on 8443 too (and on 80).
        assert!(
            code_and_time(&out, "deny_port", &context)
                .0
                .ends_with("/403"),
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "deny_80", &context).0,
            "403/000",
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "allow_port", &context).0,
            "200/200",
            "{context}"
        );
        // Item 4: only ClientHellos naming the tunnel's host reach the server; the rest
        // are closed before a byte goes upstream, and port 443 carries only TLS.
        assert_eq!(field(&out, "tls_good"), Some("200 closed"), "{context}");
        let silent: f64 = field(&out, "silent_443")
            .and_then(|v| v.split_whitespace().nth(1))
            .and_then(|t| t.parse().ok())
            .unwrap_or(99.0);
        assert!(
            (4.0..9.0).contains(&silent),
            "silent for {silent} s\n{context}"
        );
        assert_eq!(field(&out, "plain_443"), Some("200 closed"), "{context}");
        assert_eq!(
            field(&out, "other_port_bytes"),
            Some("200 closed"),
            "{context}"
        );
        let raw: Vec<&str> = requests.lines().filter(|l| l.contains(" RAW ")).collect();
        let reached = |port: &str, word: &str| {
            raw.iter()
                .filter(|l| l.starts_with(&format!("198.51.100.7:{port} RAW ")))
                .filter(|l| !l.contains(" RAW 0 "))
                .any(|l| l.contains(word))
        };
        assert!(reached("443", "api.stand-in.test"), "{context}");
        assert!(reached("9443", "hello-other-port"), "{context}");
        for word in ["evil.example", "www.allowed.test", "denied-plain-443"] {
            assert!(
                !requests.contains(word),
                "{word} reached a server\n{context}"
            );
        }
        // Exactly the two ClientHellos naming the host (CONNECT and SOCKS) and the plain
        // bytes on 9443 carried anything.
        let carried = raw.iter().filter(|l| !l.contains(" RAW 0 ")).count();
        assert_eq!(carried, 3, "{context}");
        // Refused tunnels are logged with the reason and summarised.
        let lines: Vec<Value> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let reasons: Vec<String> = lines
            .iter()
            .filter(|l| l["host"] == "api.stand-in.test" && l["decision"] == "deny")
            .map(|l| l["reason"].as_str().unwrap_or("").to_owned())
            .collect();
        for want in [
            "ClientHello names evil.example, not the tunnel's host",
            "ClientHello names www.allowed.test, not the tunnel's host",
            "names no host (SNI)",
            "port 443 carries only TLS",
            "sent no TLS ClientHello in time",
        ] {
            assert!(
                reasons.iter().any(|r| r.contains(want)),
                "{want}: {reasons:#?}\n{context}"
            );
        }
        assert!(err.contains("refused api.stand-in.test:443 "), "{context}");
        assert!(!err.contains("--allow-domain 192.0.2.1"), "{context}");
        assert!(!err.contains("--allow-domain 169.254"), "{context}");
        assert!(!err.contains("--allow-domain localhost"), "{context}");
        // Nothing refused reached any server.
        assert!(!requests.contains("denied"), "{context}");
    });
}

/// Bytes each way in [`a_large_tunnel_arrives_intact_both_ways_and_after_a_half_close`].
const BULK: usize = 50 << 20;

#[test]
fn a_large_tunnel_arrives_intact_both_ways_and_after_a_half_close() {
    if !ready() {
        return;
    }
    for_each_user(|w| {
        let net = Net::new(w);
        let log = w.root.join("net.jsonl");
        std::fs::write(net.dir.join("bulk.py"), helper_text("egress_bulk.py")).unwrap();
        w.write("home/project/bulk.py", &helper_text("egress_bulk.py"));
        let d = net.dir.display();
        // The bulk server: 9000 echoes as it reads, 9001 answers only after the client's
        // end of file (the tunnel half-closed).
        let setup = format!(
            "nsenter -t $INET -n /usr/bin/python3 {d}/bulk.py server 198.51.100.7 {d}/bulk-ready {BULK} >/dev/null 2>&1 &
i=0; while [ ! -e {d}/bulk-ready ]; do [ $i -lt 200 ] || break; sleep 0.05; i=$((i+1)); done"
        );
        let inner =
            format!("/usr/bin/python3 bulk.py client {PROXY_PORT} api.stand-in.test {BULK}\n");
        let (out, err) = net.run(
            &[
                "--allow-domain",
                "api.stand-in.test:9000",
                "--allow-domain",
                "api.stand-in.test:9001",
                "--net-log",
                log.to_str().unwrap(),
            ],
            &[],
            &inner,
            &setup,
            "",
        );
        let context = format!("[{}]\nstdout:\n{out}\nstderr:\n{err}", w.user.label);
        assert_eq!(field(&out, "sandy_exit"), Some("0"), "{context}");
        assert_eq!(
            field(&out, "echo"),
            Some(&*format!("{BULK} intact")),
            "{context}"
        );
        assert_eq!(
            field(&out, "later"),
            Some(&*format!("{BULK} intact")),
            "{context}"
        );
        // The log counts every byte of each tunnel, each way.
        let lines: Vec<Value> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let tunnel = |port: u16| {
            lines
                .iter()
                .find(|l| l["port"] == port && l["decision"] == "allow")
                .unwrap_or_else(|| panic!("no line for port {port}\n{lines:#?}\n{context}"))
        };
        let (echo, later) = (tunnel(9000), tunnel(9001));
        assert_eq!(echo["bytes_up"].as_u64(), Some(BULK as u64), "{context}");
        assert_eq!(echo["bytes_down"].as_u64(), Some(BULK as u64), "{context}");
        assert_eq!(later["bytes_up"].as_u64(), Some(BULK as u64), "{context}");
        // The answer's first line: the count and a SHA-256 (64 hex digits).
        let head = format!("{BULK} ").len() as u64 + 64 + 1;
        assert_eq!(
            later["bytes_down"].as_u64(),
            Some(BULK as u64 + head),
            "{context}"
        );
    });
}

#[test]
fn thousands_of_held_connections_leave_the_next_request_working_and_the_command_its_limit() {
    if !ready() {
        return;
    }
    for_each_user(|w| {
        let net = Net::new(w);
        let inner = format!(
            "{CURL_FN}\
echo inner_nofile=$(ulimit -Sn)
/usr/bin/python3 client.py {PROXY_PORT} flood 2000 15 flood.out &
i=0; while ! grep -q opened flood.out 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
cat flood.out
c after http://api.stand-in.test/allowed-after-flood
c after_connect -p http://api.stand-in.test:8443/allowed-after-flood-connect
wait
cat flood.out
"
        );
        // The caller's soft limit is the usual 1024 (the hard one higher).
        let (out, err) = net.run(
            &[
                "--allow-domain",
                "api.stand-in.test",
                "--allow-domain",
                "api.stand-in.test:8443",
            ],
            &[],
            &inner,
            "ulimit -Sn 1024; echo outer_hard=$(ulimit -Hn)",
            "",
        );
        let requests = net.requests();
        let context = format!(
            "[{}]\nstdout:\n{out}\nstderr:\n{err}\nserver log:\n{requests}",
            w.user.label
        );
        assert_eq!(field(&out, "sandy_exit"), Some("0"), "{context}");
        assert_eq!(field(&out, "opened"), Some("2000"), "{context}");
        // The command keeps the caller's soft limit; only the supervisor raised its own.
        assert_eq!(field(&out, "inner_nofile"), Some("1024"), "{context}");
        // While the 2000 connections are held, the next requests still get through,
        // judged by the server that saw them.
        assert_eq!(
            code_and_time(&out, "after", &context).0,
            "200/000",
            "{context}"
        );
        assert_eq!(
            code_and_time(&out, "after_connect", &context).0,
            "200/200",
            "{context}"
        );
        assert!(requests.contains("/allowed-after-flood "), "{context}");
        assert!(
            requests.contains("/allowed-after-flood-connect "),
            "{context}"
        );
        eprintln!(
            "[{}] held {:?}, then: {:?} and {:?} (code, seconds)",
            w.user.label,
            field(&out, "opened"),
            field(&out, "after"),
            field(&out, "after_connect")
        );
    });
}

#[test]
fn the_readable_dry_run_describes_the_allowlist_and_the_help_matches_net_agent() {
    for_each_user(|w| {
        let mut cmd = w.sandy([
            "run",
            "--dry-run",
            "--format",
            "text",
            "--profile",
            "codex",
            "--net",
            "agent",
            "--allow-domain",
            "registry.npmjs.org",
            "--deny-domain",
            "evil.example",
            "--",
            "true",
        ]);
        cmd.env("OPENAI_BASE_URL", "https://gw.example.com:8443/v1");
        let o = cmd.output().unwrap();
        assert_code(&o, 0, "text dry run");
        let text = stdout(&o);
        let network = &text[text.find("network:").expect("no network line")..];
        assert!(!network.contains("--block-net"), "{network}");
        for want in [
            "only the allowlist, through Sandy's egress proxy at 127.0.0.1:3128",
            "allowed:  registry.npmjs.org (ports 80, 443) [flag]",
            "gw.example.com:8443 [base URL: OPENAI_BASE_URL, in place of api.openai.com]",
            "auth.openai.com (ports 80, 443) [profile: ",
            "denied:   evil.example (every port) [flag]",
            "left out: ",
            "ab.chatgpt.com (codex telemetry: ",
            "this host's own addresses",
            "ClientHello (SNI)",
        ] {
            assert!(network.contains(want), "{want}\n{network}");
        }
        let help = stdout(&w.sandy(["run", "--help"]).output().unwrap());
        assert!(
            help.contains("its telemetry, update, plugin and notice hosts stay refused"),
            "{help}"
        );
        assert!(!help.contains("login; telemetry"), "{help}");
        assert!(
            help.contains("without :PORT every port is refused"),
            "{help}"
        );
    });
}

#[test]
fn package_tools_reach_an_allowed_registry_and_are_refused_elsewhere_at_once() {
    if !ready() {
        return;
    }
    for_each_user(|w| {
        let net = Net::new(w);
        // The stand-in answers every path with a short text, so the tools fail after the
        // request; what matters is which requests reach a server, and how fast a refusal
        // comes back.
        let inner = "t() { k=$1; shift; t0=$(date +%s%N); \"$@\" >out.$k 2>&1; r=$?; t1=$(date +%s%N); echo \"$k=$r $(( (t1 - t0) / 1000000 ))\"; }
for h in api.stand-in.test other.test; do
  case $h in api.*) tag=allowed;; *) tag=denied;; esac
  t git-$tag git ls-remote http://$h/$tag-git.git
  t npm-$tag npm view --registry http://$h/$tag-npm/ left-pad
  t pip-$tag /usr/bin/python3 -m pip download --retries 1 --no-cache-dir --trusted-host $h --index-url http://$h/$tag-pip/simple -d pipdl left-pad
done
for k in git npm; do echo \"$k-says=$(grep -c -e 'allow-domain other.test' -e 403 out.$k-denied)\"; done
";
        let (out, err) = net.run(&["--allow-domain", "api.stand-in.test"], &[], inner, "", "");
        let requests = net.requests();
        let context = format!("[{}]\n{out}\n{err}\n{requests}", w.user.label);
        for tool in ["git", "npm", "pip"] {
            assert!(
                requests.contains(&format!("/allowed-{tool}")),
                "{tool}'s request did not reach the allowed host\n{context}"
            );
            let v = field(&out, &format!("{tool}-denied")).unwrap_or_else(|| panic!("{context}"));
            let ms: u64 = v.split_whitespace().nth(1).unwrap().parse().unwrap();
            assert!(ms < 10_000, "{tool} took {ms} ms to be refused\n{context}");
        }
        for tool in ["git", "npm"] {
            assert_ne!(
                field(&out, &format!("{tool}-says")),
                Some("0"),
                "{tool}\n{context}"
            );
        }
        assert!(!requests.contains("denied"), "{context}");
        assert!(err.contains("refused other.test:80"), "{context}");
    });
}

/// (pip is told to retry once: its own five retries, with a backoff adding up to 7.5 s,
/// are not what is measured, and made the 10 s bound a coin toss on a loaded machine.)
#[test]
fn block_net_answers_every_request_at_once_and_tools_say_why() {
    if !ready() {
        return;
    }
    for_each_user(|w| {
        let net = Net::new(w);
        let inner = format!(
            "{CURL_FN}\
c plain http://api.stand-in.test/denied-blocked
echo body=$(curl -sS http://api.stand-in.test/denied-body)
c https https://api.stand-in.test/denied-https
t() {{ k=$1; shift; t0=$(date +%s%N); \"$@\" >out.$k 2>&1; r=$?; t1=$(date +%s%N); echo \"$k=$r $(( (t1 - t0) / 1000000 ))\"; }}
t git git ls-remote http://api.stand-in.test/denied-git.git
t npm npm view --registry http://api.stand-in.test/denied-npm/ left-pad
t pip /usr/bin/python3 -m pip download --retries 1 --no-cache-dir --index-url https://api.stand-in.test/denied-pip/simple -d pipdl left-pad
for k in git npm pip; do echo \"$k-says=$(grep -c -e 'blocked by --block-net' -e 403 out.$k)\"; done
"
        );
        let (out, err) = net.run(&["--block-net"], &[], &inner, "", "");
        let requests = net.requests();
        let context = format!("[{}]\n{out}\n{err}\n{requests}", w.user.label);
        let (code, time) = code_and_time(&out, "plain", &context);
        assert_eq!(code, "403/000", "{context}");
        assert!(time < FAST, "{context}");
        assert_eq!(
            field(&out, "body"),
            Some("sandy: network blocked by --block-net"),
            "{context}"
        );
        assert!(
            code_and_time(&out, "https", &context).0.ends_with("/403"),
            "{context}"
        );
        for tool in ["git", "npm", "pip"] {
            let v = field(&out, tool).unwrap_or_else(|| panic!("{tool}\n{context}"));
            let mut parts = v.split_whitespace();
            assert_ne!(parts.next(), Some("0"), "{tool} succeeded\n{context}");
            let ms: u64 = parts.next().unwrap().parse().unwrap();
            assert!(ms < 10_000, "{tool} took {ms} ms\n{context}");
            let says = field(&out, &format!("{tool}-says")).unwrap_or("0");
            assert_ne!(
                says,
                "0",
                "{tool} does not say why\n{context}\n{}",
                std::fs::read_to_string(w.project.join(format!("out.{tool}"))).unwrap_or_default()
            );
        }
        assert!(requests.is_empty(), "{context}");
        assert!(
            err.contains("network blocked by --block-net") || err.contains("refused"),
            "{context}"
        );
    });
}

/// One real agent against the stand-in model API, which listens on the public-looking
/// address and is named by its base URL variable, so that only the proxy can take the
/// agent there: `--net agent` must let it finish its task while whatever else it tries
/// is refused.
struct AgentRun<'a> {
    agent: &'a str,
    /// The base URL variable the profile honours, and the path after host:port.
    base_var: &'a str,
    base_path: &'a str,
    /// Files written into the home before the run (home-relative paths).
    files: &'a [(&'a str, &'a str)],
    env: &'a [(&'a str, &'a str)],
    /// The command inside (the base URL variable is set).
    inner: &'a str,
    final_text: &'a str,
    /// A request path the stand-in must have seen.
    api_path: &'a str,
}

fn agent_through_the_proxy(run: &AgentRun<'_>) {
    if !ready() {
        return;
    }
    if !agent_installed(run.agent) {
        return;
    }
    for_each_user(|w| {
        let net = Net::new(w);
        let log = w.root.join("net.jsonl");
        for (path, text) in run.files {
            w.write(format!("home/{path}"), text);
        }
        let api_dir = w.root.join("api");
        std::fs::create_dir_all(&api_dir).unwrap();
        std::fs::write(api_dir.join("fake.py"), helper_text("fake_model_api.py")).unwrap();
        std::fs::write(
            api_dir.join("script.json"),
            serde_json::json!({"steps": [], "final": run.final_text}).to_string(),
        )
        .unwrap();
        let a = api_dir.display();
        let setup = format!(
            "FAKE_MODEL_API_BIND=198.51.100.7 nsenter -t $INET -n /usr/bin/python3 {a}/fake.py {a} {a}/script.json > {a}/port.json 2>/dev/null &
i=0; while [ ! -s {a}/port.json ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
PORT=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"port\"])' {a}/port.json)
echo \"api_port=$PORT\" > {a}/env
"
        );
        let inner = format!("{}; echo agent_exit=$?\n", run.inner);
        let (out, err) = net.run_agent(run, &setup, &log, &inner);
        let requests = std::fs::read_to_string(api_dir.join("requests.jsonl")).unwrap_or_default();
        let context = format!(
            "[{} {}]\nstdout:\n{out}\nstderr:\n{err}\napi:\n{requests}",
            run.agent, w.user.label
        );
        assert_eq!(field(&out, "agent_exit"), Some("0"), "{context}");
        assert!(out.contains(run.final_text), "{context}");
        assert!(requests.contains(run.api_path), "{context}");
        let lines: Vec<Value> = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(
            lines.iter().any(|l| l["host"] == "api.stand-in.test"
                && l["decision"] == "allow"
                && l["rule"].as_str().unwrap_or("").starts_with("base URL")),
            "{lines:#?}\n{context}"
        );
        // Whatever else it tried was refused.
        for l in &lines {
            if l["host"] != "api.stand-in.test" {
                assert_ne!(l["decision"], "allow", "{l}\n{context}");
            }
        }
        eprintln!(
            "[{} {}] destinations: {:?}",
            run.agent,
            w.user.label,
            lines
                .iter()
                .map(|l| format!("{}:{} {}", l["host"], l["port"], l["decision"]))
                .collect::<Vec<_>>()
        );
    });
}

#[test]
fn claude_code_reaches_its_api_by_name_through_the_proxy_and_nothing_else() {
    agent_through_the_proxy(&AgentRun {
        agent: "claude",
        base_var: "ANTHROPIC_BASE_URL",
        base_path: "",
        files: &[(".claude.json", "{}\n"), (".claude/settings.json", "{}\n")],
        env: &[("ANTHROPIC_API_KEY", "dummy")],
        inner: "claude -p 'say hello' --output-format json",
        final_text: "Claude Code said hello through the proxy",
        api_path: "/v1/messages",
    });
}

#[test]
fn codex_reaches_its_api_by_name_through_the_proxy_and_nothing_else() {
    agent_through_the_proxy(&AgentRun {
        agent: "codex",
        base_var: "OPENAI_BASE_URL",
        base_path: "/v1",
        files: &[(".codex/config.toml", "model = \"gpt-5\"\n")],
        env: &[("OPENAI_API_KEY", "dummy")],
        inner: r#"codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -c 'model_provider="fake"' -c "model_providers.fake={name=\"fake\", base_url=\"$OPENAI_BASE_URL\", wire_api=\"responses\", env_key=\"OPENAI_API_KEY\"}" -m gpt-5 'say hello'"#,
        final_text: "Codex said hello through the proxy",
        api_path: "/v1/responses",
    });
}

#[test]
fn gemini_cli_reaches_its_api_by_name_through_the_proxy_and_nothing_else() {
    agent_through_the_proxy(&AgentRun {
        agent: "gemini",
        base_var: "GOOGLE_GEMINI_BASE_URL",
        base_path: "",
        files: &[(
            ".gemini/settings.json",
            r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}, "privacy": {"usageStatisticsEnabled": false}, "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false}}"#,
        )],
        env: &[
            ("GEMINI_API_KEY", "dummy"),
            ("GEMINI_CLI_TRUST_WORKSPACE", "true"),
        ],
        inner: "gemini -p 'say hello'",
        final_text: "Gemini CLI said hello through the proxy",
        api_path: "/v1beta/models/",
    });
}

impl Net<'_> {
    /// Like [`Net::run`] for an agent: its base URL variable names the stand-in started
    /// by `setup` (its port known only then, so a wrapper sets it), the agents are on
    /// `PATH`, `--net agent` with the agent's profile.
    fn run_agent(
        &self,
        run: &AgentRun<'_>,
        setup: &str,
        log: &Path,
        inner: &str,
    ) -> (String, String) {
        use std::os::unix::fs::PermissionsExt;
        let a = self.w.root.join("api");
        let wrapper = format!(
            "#!/bin/sh\n. {a}/env\nexec env {var}=http://api.stand-in.test:$api_port{path} \"$@\"\n",
            a = a.display(),
            var = run.base_var,
            path = run.base_path,
        );
        let wrapper_path = a.join("with-api.sh");
        std::fs::write(&wrapper_path, wrapper).unwrap();
        std::fs::set_permissions(&wrapper_path, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o755)).unwrap();
        let setup = format!("{setup}\nchmod 644 {}/env\n", a.display());
        let path = agent_path(run.agent);
        let mut env: Vec<(&str, &str)> = run.env.to_vec();
        env.push(("PATH", &path));
        self.run_with_prefix(
            &[
                "--profile",
                run.agent,
                "--net",
                "agent",
                "--net-log",
                log.to_str().unwrap(),
            ],
            &env,
            inner,
            &setup,
            &format!("{} ", wrapper_path.display()),
        )
    }
}

#[test]
fn the_dry_run_shows_the_mode_and_every_rule_with_its_origin() {
    let schema_text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../schemas/dry-run.v7.schema.json"
    ))
    .unwrap();
    let schema: Value = serde_json::from_str(&schema_text).unwrap();
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    for_each_user(|w| {
        let dry = |flags: &[&str], env: &[(&str, &str)]| {
            let mut args = vec!["run", "--dry-run"];
            args.extend_from_slice(flags);
            args.extend_from_slice(&["--", "true"]);
            let mut cmd = w.sandy(args);
            for (k, v) in env {
                cmd.env(k, v);
            }
            let o = cmd.output().unwrap();
            assert_code(&o, 0, "dry run");
            let doc = parse_dry_run(&o.stdout, "dry run");
            let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{errors:?}\n{doc:#}");
            doc
        };
        // The open network: no proxy, no proxy variables.
        let open = dry(&[], &[]);
        assert_eq!(open["network"], "allow_all");
        assert_eq!(open["egress"], Value::Null);
        assert!(!open["environment"]["set"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "HTTPS_PROXY"));
        // An allowlist from flags, the profile and a base URL, deny first.
        let doc = dry(
            &[
                "--profile",
                "claude",
                "--net",
                "agent",
                "--allow-domain",
                "Registry.NPMJS.org.",
                "--deny-domain",
                "*.evil.example:8443",
            ],
            &[(
                "ANTHROPIC_BASE_URL",
                "https://Gateway.Example.com:8443/anthropic",
            )],
        );
        assert_eq!(doc["network"], "block_all");
        let egress = &doc["egress"];
        assert_eq!(egress["mode"], "allowlist");
        assert_eq!(egress["proxy"], "127.0.0.1:3128");
        let rules: Vec<(String, String, String)> = egress["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["action"].as_str().unwrap().to_owned(),
                    r["pattern"].as_str().unwrap().to_owned(),
                    r["origin"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let has = |a: &str, p: &str, o: &str| {
            rules
                .iter()
                .any(|r| r == &(a.to_owned(), p.to_owned(), o.to_owned()))
        };
        assert_eq!(
            rules[0],
            ("deny".into(), "*.evil.example:8443".into(), "flag".into())
        );
        assert!(has("allow", "registry.npmjs.org", "flag"), "{rules:?}");
        assert!(
            has("allow", "gateway.example.com:8443", "base_url"),
            "{rules:?}"
        );
        assert!(has("allow", "platform.claude.com", "profile"), "{rules:?}");
        // The base URL replaced the default API host; telemetry, update checks and the
        // like are left out, named with their role, and allow nothing.
        assert!(
            !rules.iter().any(|r| r.1 == "api.anthropic.com"),
            "{rules:?}"
        );
        let left_out = dry_run_left_out(&doc);
        let note = |p: &str| {
            left_out
                .iter()
                .find(|l| l.0 == p)
                .map(|l| l.1.clone())
                .unwrap_or_else(|| panic!("{p} not left out: {left_out:?}"))
        };
        assert!(note("api.anthropic.com").contains("replaced by ANTHROPIC_BASE_URL"));
        assert!(note("raw.githubusercontent.com").contains("notices"));
        assert!(note("downloads.claude.ai").contains("plugins"));
        for (pattern, _) in &left_out {
            assert!(
                !rules.iter().any(|r| &r.1 == pattern && r.2 == "profile"),
                "{pattern} both allowed by the profile and left out: {rules:?}"
            );
        }
        // Without --net agent nothing is left out.
        let flags_only = dry(&["--allow-domain", "example.com"], &[]);
        assert_eq!(flags_only["egress"]["left_out"], serde_json::json!([]));
        let set = doc["environment"]["set"].as_array().unwrap();
        for v in ["HTTP_PROXY", "https_proxy", "ALL_PROXY", "no_proxy"] {
            assert!(set.iter().any(|s| s == v), "{v} not set: {set:?}");
        }
        // --block-net: the same listener, refusing everything; a local port moves the
        // proxy to the next free port.
        let blocked = dry(&["--block-net", "--allow-local-port", "3128"], &[]);
        assert_eq!(blocked["egress"]["mode"], "blocked");
        assert_eq!(blocked["egress"]["proxy"], "127.0.0.1:3129");
        assert_eq!(blocked["egress"]["rules"], serde_json::json!([]));
    });
}

#[test]
fn bad_network_flags_are_usage_errors_that_run_nothing() {
    for_each_user(|w| {
        let marker = w.project.join("ran");
        for (flags, says) in [
            (&["--deny-domain", "x.example"][..], "--allow-domain"),
            (
                &["--block-net", "--allow-domain", "x.example"],
                "cannot be used with",
            ),
            (&["--allow-domain", "user@x.example"], "user information"),
            (&["--allow-domain", "a.*.example"], "wildcard"),
            (&["--allow-domain", "x.example:0"], "port"),
            (&["--allow-domain", "10.0.0.0/40"], "CIDR"),
            (&["--net", "everything"], "invalid value"),
            (&["--net-log", "/dev/null"], "--block-net"),
            (&["--allow-local-port", "0"], "1..=65535"),
        ] {
            let mut args = vec!["run"];
            args.extend_from_slice(flags);
            args.extend_from_slice(&["--", "touch", "ran"]);
            let o = w.sandy(args).output().unwrap();
            assert_code(&o, 2, &format!("{flags:?}"));
            assert!(stderr(&o).contains(says), "{flags:?}: {}", stderr(&o));
            assert!(!marker.exists(), "{flags:?} ran the command");
        }
        // --net agent with a profile that names no endpoints fails before launch.
        let o = w
            .sandy(["run", "--net", "agent", "--", "touch", "ran"])
            .output()
            .unwrap();
        assert_code(&o, 125, "--net agent, generic profile");
        assert!(
            stderr(&o).contains("names no network endpoints"),
            "{}",
            stderr(&o)
        );
        assert!(!marker.exists());
    });
}
