//! The release tarball `make dist` builds: it unpacks, its checksums hold, and its module
//! loads into a fresh server, which answers. `make test` builds it first and names it in
//! `RATELIMIT_DIST`.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::{ints, query, Server};

fn tarball() -> PathBuf {
    let path = std::env::var_os("RATELIMIT_DIST")
        .map(PathBuf::from)
        .expect(
            "RATELIMIT_DIST names the tarball: run `make test`, which builds it with `make dist`",
        );
    assert!(path.is_file(), "{} does not exist", path.display());
    path
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("the command runs");
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_release_tarball_unpacks_checks_out_and_loads() {
    let tarball = tarball();
    let name = tarball.file_name().unwrap().to_str().unwrap().to_owned();
    let version = env!("CARGO_PKG_VERSION");
    let stem = name.strip_suffix(".tar.gz").expect("a .tar.gz");
    assert!(
        stem.starts_with(&format!("redis-ratelimit-{version}-linux-")),
        "{name}"
    );
    // The checksum beside the tarball.
    let dist = tarball.parent().unwrap();
    run(Command::new("sha256sum")
        .arg("-c")
        .arg(format!("{name}.sha256"))
        .current_dir(dist));

    let unpacked = std::env::temp_dir().join(format!("ratelimit-dist-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&unpacked);
    std::fs::create_dir_all(&unpacked).unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(&unpacked));
    let root = unpacked.join(stem);
    for file in [
        "libredis_ratelimit.so",
        "README.md",
        "LICENSE",
        "CHANGELOG.md",
        "BENCHMARKS.md",
        "SHA256SUMS",
        "examples/python/ratelimit_client.py",
    ] {
        assert!(root.join(file).is_file(), "{file} is not in the tarball");
    }
    assert!(
        root.join("docs/commands").is_dir(),
        "the docs are not in the tarball"
    );
    // Every file the checksums list is there, unchanged.
    let checked = run(Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&root));
    assert!(checked.contains("libredis_ratelimit.so: OK"), "{checked}");

    let module = root.join("libredis_ratelimit.so");
    let server = Server::builder()
        .without_module()
        .arg("loadmodule", module.to_str().unwrap())
        .start();
    let mut con = server.connect();
    let expected = version
        .split('.')
        .map(|part| part.parse::<i64>().unwrap())
        .fold(0, |encoded, part| encoded * 100 + part);
    assert_eq!(
        support::module_version(&mut con, "ratelimit"),
        Some(expected)
    );
    assert_eq!(
        ints(&mut con, &["CL.THROTTLE", "k", "4", "1", "60"]),
        [0, 5, 4, -1, 60]
    );
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
    assert!(
        changelog.contains(&format!("## [{version}]")),
        "CHANGELOG.md has no entry for {version}"
    );
    let _: () = query(&mut con, &["FLUSHALL"]);
    drop(server);
    let _ = std::fs::remove_dir_all(&unpacked);
}
