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
        "examples/python/demo.py",
    ] {
        assert!(root.join(file).is_file(), "{file} is not in the tarball");
    }
    // The client packages, beside the module, and their checksums listed.
    let sums = std::fs::read_to_string(root.join("SHA256SUMS")).unwrap();
    for package in [".whl", ".tgz"] {
        assert!(
            sums.lines()
                .any(|line| line.contains("redis") && line.ends_with(package)),
            "no {package} package in the tarball:\n{sums}"
        );
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

    // The client packages install from the tarball, without the registries.
    let file_ending = |ending: &str| {
        std::fs::read_dir(&root)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .find(|path| path.to_string_lossy().ends_with(ending))
            .unwrap_or_else(|| panic!("no {ending} in the tarball"))
    };
    let python = support::clients_python();
    let site = unpacked.join("site-packages");
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
        ])
        .arg(&site)
        .arg(file_ending(".whl")));
    let imported = run(Command::new(&python)
        .args([
            "-c",
            "import ratelimit_module; print(ratelimit_module.__version__)",
        ])
        .env("PYTHONPATH", &site)
        .current_dir(&unpacked));
    assert!(imported.trim().starts_with('0'), "{imported}");
    let app = unpacked.join("node-app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(
        app.join("package.json"),
        r#"{"name": "app", "private": true}"#,
    )
    .unwrap();
    run(Command::new("npm")
        .args([
            "install",
            "--offline",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .arg(file_ending(".tgz"))
        .current_dir(&app));
    let required = run(Command::new("node")
        .args([
            "-e",
            "console.log(typeof require('redis-ratelimit-module').RateLimiter)",
        ])
        .current_dir(&app));
    assert_eq!(required.trim(), "function");
    // The Lua package: its rockspec installs every module with luarocks, offline, as the
    // files of lib/ (which nginx also takes copied onto its lua_package_path).
    let lua = root.join("clients/lua");
    let rockspec = std::fs::read_dir(&lua)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "rockspec"))
        .expect("no rockspec in the tarball");
    let tree = unpacked.join("rocks");
    run(Command::new("luarocks")
        .arg("make")
        .arg("--tree")
        .arg(&tree)
        .arg(&rockspec)
        .current_dir(&lua));
    let installed = tree.join("share/lua/5.1/resty/ratelimit_module");
    let shipped = lua.join("lib/resty/ratelimit_module");
    let mut modules = 0;
    for entry in std::fs::read_dir(&shipped).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        assert!(
            std::fs::read(installed.join(name)).ok() == Some(std::fs::read(&path).unwrap()),
            "{name:?} is not installed as shipped (is it in the rockspec's modules?)"
        );
        modules += 1;
    }
    assert!(modules >= 8, "{modules} modules");

    drop(server);
    let _ = std::fs::remove_dir_all(&unpacked);
}
