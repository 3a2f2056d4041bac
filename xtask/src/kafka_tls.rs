//! The certificates of the Kafka rig's SSL and MTLS listeners, made with the `openssl` command
//! line at every `broker start --kafka` (a fresh CA each time, so nothing outlives its cluster).
//!
//! Files in the cluster's `tls/` folder, all PEM with unencrypted PKCS#8 keys (what Kafka's PEM
//! key store reads without `ssl.key.password`, `DefaultSslEngineFactory.PemStore`):
//! - `ca.pem`, `ca-key.pem`: the test CA (P-256, `basicConstraints=CA:TRUE`);
//! - `server.pem`, `server-key.pem`: the brokers' certificate, for IP 127.0.0.1 and DNS
//!   `localhost` (what the listeners advertise and what a test dials), and
//!   `server-keystore.pem`, the key followed by the certificate, which the listeners'
//!   `ssl.keystore.location` names;
//! - `client.pem`, `client-key.pem`: a client certificate (CN `kafkit-client`) for the MTLS
//!   listener, which trusts `ca.pem`.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::broker::Result;

/// Days the certificates are valid: longer than any cluster lives.
const DAYS: &str = "3650";

/// The test CA's certificate (the MTLS listener's trust store; what a test trusts).
pub const CA: &str = "ca.pem";

/// The key store of the brokers' listeners (key, then certificate).
pub const SERVER_KEYSTORE: &str = "server-keystore.pem";

/// Makes the CA, the server and the client certificates in `dir` (created, emptied first).
///
/// # Errors
/// When `openssl` is missing or one of its steps fails: the step and openssl's own words.
pub fn make(dir: &Path) -> Result<()> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    openssl(
        dir,
        "make the test CA",
        &[
            "req",
            "-x509",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca-key.pem",
            "-out",
            CA,
            "-days",
            DAYS,
            "-subj",
            "/CN=kafkit test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    )?;
    leaf(
        dir,
        "server",
        "/CN=localhost",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        "01",
    )?;
    leaf(
        dir,
        "client",
        "/CN=kafkit-client",
        "extendedKeyUsage=clientAuth\n",
        "02",
    )?;
    let read =
        |name: &str| fs::read_to_string(dir.join(name)).map_err(|e| format!("read {name}: {e}"));
    let keystore = read("server-key.pem")? + &read("server.pem")?;
    fs::write(dir.join(SERVER_KEYSTORE), keystore)
        .map_err(|e| format!("write {SERVER_KEYSTORE}: {e}"))
}

/// A key and a certificate signed by the CA: `<name>-key.pem` and `<name>.pem`, with `extensions`
/// (an openssl extension file's lines) besides `basicConstraints=CA:FALSE` and a signing key usage.
fn leaf(dir: &Path, name: &str, subject: &str, extensions: &str, serial: &str) -> Result<()> {
    let key = format!("{name}-key.pem");
    let csr = format!("{name}.csr");
    let ext = format!("{name}.ext");
    let cert = format!("{name}.pem");
    fs::write(
        dir.join(&ext),
        format!(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n{extensions}"
        ),
    )
    .map_err(|e| format!("write {ext}: {e}"))?;
    openssl(
        dir,
        &format!("make the {name} key and request"),
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            subject,
        ],
    )?;
    openssl(
        dir,
        &format!("sign the {name} certificate"),
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            CA,
            "-CAkey",
            "ca-key.pem",
            "-set_serial",
            serial,
            "-days",
            DAYS,
            "-extfile",
            &ext,
            "-out",
            &cert,
        ],
    )
}

/// Runs `openssl <args>` in `dir`; `step` says what it was for when it fails.
fn openssl(dir: &Path, step: &str, args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "broker: the Kafka rig's TLS listeners need the `openssl` program ({step}): {e}; \
                 install it (Debian: `apt-get install openssl`)"
            )
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "broker: openssl could not {step} ({}): openssl {}\n{}{}",
            out.status,
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
