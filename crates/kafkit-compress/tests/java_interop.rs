//! Byte-level interop with the Java libraries the Kafka Java client compresses with:
//! java.util.zip (gzip), snappy-java (xerial framing), lz4-java (frame streams with the Java
//! producer's header) and zstd-jni. For each codec, what we compress Java decompresses, and what
//! Java compresses we decompress.
//!
//! Ignored by default: it needs a JDK and the Java codec jars. `cargo xtask test` runs it with
//! the jars of the Java peer of the integration tests (`KAFKIT_JAVA_PEER_CP`: kafka-clients
//! 4.4's snappy-java, lz4-java and zstd-jni, native libraries inside the jars). By hand:
//! `KAFKIT_JAVA_PEER_CP=$(cargo xtask java-peer) cargo test -p kafkit-compress --test
//! java_interop -- --ignored`. Without that variable it takes the Debian packages
//! `libsnappy-java`, `liblz4-java`, `libzstd-jni-java` and `libzstd-jni1` (jars in
//! /usr/share/java).

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::BytesMut;
use kafkit_compress::Compression;

/// The Java peer's class path (`cargo xtask java-peer`), which holds the codec jars.
const JAVA_PEER_CP_ENV: &str = "KAFKIT_JAVA_PEER_CP";

const DEBIAN_JARS: [&str; 3] = [
    "/usr/share/java/snappy-java.jar",
    "/usr/share/java/lz4-java.jar",
    "/usr/share/java/zstd-jni.jar",
];
const DEBIAN_NATIVE: &str = "/usr/lib/x86_64-linux-gnu/jni:/usr/lib/x86_64-linux-gnu";

/// The codec jars' class path, and where their native libraries are when not in the jars.
fn jars() -> (String, Option<&'static str>) {
    if let Ok(cp) = std::env::var(JAVA_PEER_CP_ENV)
        && !cp.trim().is_empty()
    {
        return (cp.trim().to_string(), None);
    }
    for jar in DEBIAN_JARS {
        assert!(
            Path::new(jar).exists(),
            "{jar} is missing: set {JAVA_PEER_CP_ENV}=$(cargo xtask java-peer), or apt-get \
             install libsnappy-java liblz4-java libzstd-jni-java"
        );
    }
    (DEBIAN_JARS.join(":"), Some(DEBIAN_NATIVE))
}

/// Compiles CodecInterop.java into a fresh directory and returns it.
fn compile() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("java-interop");
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/CodecInterop.java");
    let status = Command::new("javac")
        .arg("-cp")
        .arg(jars().0)
        .arg("-d")
        .arg(&dir)
        .arg(&src)
        .status()
        .expect("javac runs (a JDK is needed)");
    assert!(status.success(), "javac failed");
    dir
}

fn java(dir: &Path, mode: &str, codec: Compression, input: &[u8]) -> Vec<u8> {
    let inp = dir.join(format!("{mode}-{codec}.in"));
    let out = dir.join(format!("{mode}-{codec}.out"));
    std::fs::write(&inp, input).unwrap();
    let (jars, native) = jars();
    let mut cmd = Command::new("java");
    if let Some(native) = native {
        cmd.arg(format!("-Djava.library.path={native}"));
    }
    let status = cmd
        .arg("-cp")
        .arg(format!("{}:{jars}", dir.display()))
        .arg("CodecInterop")
        .arg(mode)
        .arg(codec.name())
        .arg(&inp)
        .arg(&out)
        .status()
        .expect("java runs");
    assert!(status.success(), "java {mode} {codec} failed");
    std::fs::read(&out).unwrap()
}

fn sample() -> Vec<u8> {
    (0..3_000)
        .flat_map(|i| {
            format!(
                r#"{{"id":{i},"name":"user-{}","tags":["a","b{}"]}}"#,
                i * 37 % 500,
                i % 7
            )
            .into_bytes()
        })
        .collect()
}

#[test]
#[ignore = "needs a JDK and the Java codec jars (cargo xtask test runs it)"]
fn java_reads_ours_and_we_read_java() {
    let dir = compile();
    let data = sample();
    for c in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let codec = c.codec().unwrap();
        let mut ours = BytesMut::new();
        codec.compress(&data, None, &mut ours).unwrap();
        assert_eq!(
            java(&dir, "decompress", c, &ours),
            data,
            "Java reading our {c}"
        );

        let theirs = java(&dir, "compress", c, &data);
        let mut plain = BytesMut::new();
        codec.decompress(&theirs, data.len(), &mut plain).unwrap();
        assert_eq!(&plain[..], &data[..], "we reading Java's {c}");
        if c == Compression::Lz4 {
            // The Java producer's frame header: independent 64 KiB blocks, checksum 0x82.
            assert_eq!(&theirs[..7], &[0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82]);
            assert_eq!(&ours[..7], &theirs[..7]);
        }
        if c == Compression::Snappy {
            assert_eq!(
                &ours[..16],
                &theirs[..16],
                "same xerial header as snappy-java"
            );
        }
    }
}
