//! `cargo xtask <task>`: project chores that need more than a cargo command.
//!
//! - `setup-v8`: unpack Debian's V8 (inside `libnode108`, V8 10.2) and its headers into the
//!   git-ignored `.v8/` folder at the workspace root, touching nothing system-wide. The
//!   `runtime-v8` build finds it there (or wherever `CODEMODE_V8_PREFIX` points). It also copies
//!   the run-time libraries to the per-user location the `codemode` launcher searches
//!   (`${XDG_DATA_HOME:-$HOME/.local/share}/codemode/v8/lib`), so that an installed binary keeps
//!   working once the checkout is gone.
//! - `dist`: a release tarball, `target/dist/codemode-<version>-x86_64-linux-gnu.tar.gz`, with
//!   V8 and the libraries it needs beyond a base system, and their licences.
//! - `bench`: the benchmark suite (`cli/examples/bench.rs`) on a release build: one table of
//!   figures beside yardsticks measured in the same run, also written to `target/bench/bench.json`.
//! - `dist-check`: unpacks that tarball elsewhere and runs a cell and an MCP round trip with it,
//!   with the repository's V8 out of sight.
//! - `no-v8-check`: builds `codemode` without V8 (`--no-default-features`) and, with V8 out of
//!   sight, checks that it links no libnode and runs a QuickJS cell.
//! - `setup-mcp-servers`: the real third-party MCP servers the end-to-end tests drive (npm and
//!   PyPI, pinned) into `target/mcp-servers/`.
//! - `ci`: what `.ci/run` runs: setup-v8, `cargo fmt --check`, clippy with warnings denied,
//!   `cargo doc` with warnings denied, tests.

#![forbid(unsafe_code)]

mod dist;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The Debian packages that carry V8's shared library, its headers, and the library's own
/// dependencies that a fresh machine may lack.
const V8_PACKAGES: [&str; 4] = ["libnode108", "libnode-dev", "libuv1", "libc-ares2"];

/// The V8 these packages carry; the build refuses any other headers.
const EXPECTED_V8: &str = "10.2";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup-v8") => setup_v8(),
        Some("ci") => ci(),
        Some("dist") => dist::dist().map(|tarball| println!("{}", tarball.display())),
        Some("dist-check") => dist::check(),
        Some("no-v8-check") => dist::no_v8_check(),
        Some("bench") => bench(),
        Some("setup-mcp-servers") => codemode_test_support::mcp_servers::install(&workspace_root())
            .map(|_| {
                println!(
                    "MCP servers installed in {}",
                    codemode_test_support::mcp_servers::folder(&workspace_root()).display()
                )
            }),
        _ => {
            eprintln!(
                "usage: cargo xtask <task>\n\n\
                 tasks:\n  setup-v8   unpack the system V8 into .v8/ (needed before building)\n  \
                 ci         setup-v8, fmt --check, clippy -D warnings, docs, tests, dist-check\n  \
                 dist       build the release tarball in target/dist/\n  \
                 dist-check build it, unpack it elsewhere, run a cell and an MCP round trip\n  \
                 no-v8-check  build codemode without V8 and run a QuickJS cell with V8 out of sight\n  \
                 bench      the benchmark suite, release build: a table, and target/bench/bench.json\n  \
                 setup-mcp-servers  install the real MCP servers the tests drive into target/mcp-servers/"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one folder below the workspace root")
        .to_path_buf()
}

/// Where V8 goes: `CODEMODE_V8_PREFIX` if set, else `.v8/` at the workspace root.
fn v8_prefix() -> PathBuf {
    std::env::var_os("CODEMODE_V8_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".v8"))
}

/// The folder of the unpacked libraries inside a V8 prefix.
const PREFIX_LIB: &str = "usr/lib/x86_64-linux-gnu";

/// The run-time libraries of V8 that a base system lacks, as their sonames, with the Debian
/// package each comes from.
const V8_RUNTIME_LIBRARIES: [(&str, &str); 3] = [
    ("libnode.so.108", "libnode108"),
    ("libuv.so.1", "libuv1"),
    ("libcares.so.2", "libc-ares2"),
];

fn setup_v8() -> Result<(), String> {
    let prefix = v8_prefix();
    unpack_v8(&prefix)?;
    install_for_user(&prefix)
}

fn unpack_v8(prefix: &Path) -> Result<(), String> {
    let prefix = prefix.to_path_buf();
    let library = prefix.join(PREFIX_LIB).join("libnode.so.108");
    let version_header = prefix.join("usr/include/node/v8-version.h");
    if library.exists() && version_header.exists() {
        println!(
            "V8 {} is already set up in {}",
            header_version(&version_header)?,
            prefix.display()
        );
        return Ok(());
    }
    let download_dir =
        std::env::temp_dir().join(format!("codemode-v8-debs-{}", std::process::id()));
    std::fs::create_dir_all(&download_dir)
        .map_err(|error| format!("cannot create {}: {error}", download_dir.display()))?;
    // apt's download sandbox user must be able to write here.
    let _ = run(Command::new("chmod").arg("777").arg(&download_dir));
    let download = || {
        run(Command::new("apt-get")
            .arg("download")
            .args(V8_PACKAGES)
            .current_dir(&download_dir))
    };
    if download().is_err() {
        println!(
            "apt-get download failed; refreshing the package lists with apt-get update and retrying"
        );
        run(Command::new("apt-get").arg("update")).map_err(|error| {
            format!("{error}\nsetup-v8 needs Debian's apt-get with access to the package registry")
        })?;
        download()?;
    }
    // Unpack into a sibling folder and rename it into place, so an interrupted set-up never leaves a
    // half-filled prefix that later looks complete.
    let staging = prefix.with_extension("partial");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)
        .map_err(|error| format!("cannot create {}: {error}", staging.display()))?;
    let mut debs: Vec<PathBuf> = std::fs::read_dir(&download_dir)
        .map_err(|error| format!("cannot list {}: {error}", download_dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|extension| extension == "deb"))
        .collect();
    debs.sort();
    if debs.len() != V8_PACKAGES.len() {
        return Err(format!(
            "expected {} packages in {}, found {}",
            V8_PACKAGES.len(),
            download_dir.display(),
            debs.len()
        ));
    }
    for deb in &debs {
        run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&staging))?;
    }
    let staged_header = staging.join("usr/include/node/v8-version.h");
    let version = header_version(&staged_header)?;
    if !version.starts_with(EXPECTED_V8) {
        return Err(format!(
            "the packages carry V8 {version}, but the shim is written for V8 {EXPECTED_V8}"
        ));
    }
    let _ = std::fs::remove_dir_all(&prefix);
    std::fs::rename(&staging, &prefix).map_err(|error| {
        format!(
            "cannot move {} to {}: {error}",
            staging.display(),
            prefix.display()
        )
    })?;
    let _ = std::fs::remove_dir_all(&download_dir);
    println!("V8 {version} set up in {}", prefix.display());
    Ok(())
}

/// The per-user location the `codemode` launcher searches for V8.
fn user_v8_folder() -> Result<PathBuf, String> {
    let data_home = match (std::env::var_os("XDG_DATA_HOME"), std::env::var_os("HOME")) {
        (Some(data_home), _) if Path::new(&data_home).is_absolute() => PathBuf::from(data_home),
        (_, Some(home)) => PathBuf::from(home).join(".local/share"),
        _ => return Err("neither XDG_DATA_HOME nor HOME is set: no per-user location".to_owned()),
    };
    Ok(data_home.join("codemode/v8"))
}

/// Copies V8's run-time libraries (and their licences) to the per-user location, atomically;
/// nothing to do when the same libnode is there already.
fn install_for_user(prefix: &Path) -> Result<(), String> {
    let destination = user_v8_folder()?;
    let source_lib = prefix.join(PREFIX_LIB);
    let installed = destination.join("lib/libnode.so.108");
    let same_size = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.len() == b.len(),
        _ => false,
    };
    if same_size(&installed, &source_lib.join("libnode.so.108")) {
        println!(
            "V8's libraries are already installed for this user in {}",
            destination.display()
        );
        return Ok(());
    }
    let staging = destination.with_extension("partial");
    let _ = std::fs::remove_dir_all(&staging);
    for folder in ["lib", "licenses"] {
        std::fs::create_dir_all(staging.join(folder))
            .map_err(|error| format!("cannot create {}: {error}", staging.display()))?;
    }
    for (soname, package) in V8_RUNTIME_LIBRARIES {
        let copyright = prefix.join("usr/share/doc").join(package).join("copyright");
        stage_library(
            &staging,
            soname,
            &source_lib.join(soname),
            package,
            &copyright,
        )?;
    }
    let _ = std::fs::remove_dir_all(&destination);
    std::fs::rename(&staging, &destination).map_err(|error| {
        format!(
            "cannot move {} to {}: {error}",
            staging.display(),
            destination.display()
        )
    })?;
    println!(
        "V8's libraries installed for this user in {}",
        destination.display()
    );
    Ok(())
}

/// Copies the file `from` (following links) to `to`.
/// Copies a library into `staging/lib` and its package's copyright file into `staging/licenses`.
fn stage_library(
    staging: &Path,
    soname: &str,
    library: &Path,
    package: &str,
    copyright: &Path,
) -> Result<(), String> {
    copy(library, &staging.join("lib").join(soname))?;
    copy(
        copyright,
        &staging
            .join("licenses")
            .join(format!("{package}.copyright")),
    )
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to).map(|_| ()).map_err(|error| {
        format!(
            "cannot copy {} to {}: {error}",
            from.display(),
            to.display()
        )
    })
}

/// Reads `major.minor.build.patch` out of `v8-version.h`.
fn header_version(header: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(header)
        .map_err(|error| format!("cannot read {}: {error}", header.display()))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("#define {name} ")))
            .map(|value| value.trim().to_owned())
            .ok_or_else(|| format!("{} does not define {name}", header.display()))
    };
    Ok(format!(
        "{}.{}.{}.{}",
        field("V8_MAJOR_VERSION")?,
        field("V8_MINOR_VERSION")?,
        field("V8_BUILD_NUMBER")?,
        field("V8_PATCH_LEVEL")?
    ))
}

fn ci() -> Result<(), String> {
    setup_v8()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = workspace_root();
    run(Command::new(&cargo)
        .args(["fmt", "--all", "--", "--check"])
        .current_dir(&root))?;
    run(Command::new(&cargo)
        .args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])
        .current_dir(&root))?;
    run(Command::new(&cargo)
        .args(["doc", "--no-deps", "--workspace"])
        .env("RUSTDOCFLAGS", "-D warnings")
        .current_dir(&root))?;
    codemode_test_support::mcp_servers::install(&root)?;
    run(Command::new(&cargo)
        .args(["test", "--workspace"])
        .current_dir(&root))?;
    dist::check()
}

fn bench() -> Result<(), String> {
    setup_v8()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = workspace_root();
    run(Command::new(&cargo)
        .args(["build", "--release", "-p", "codemode-cli"])
        .current_dir(&root))?;
    let json = root.join("target/bench/bench.json");
    let codemode = root.join("target/release/codemode");
    let mut bench = Command::new(&cargo);
    bench
        .args([
            "run",
            "--release",
            "-q",
            "-p",
            "codemode-cli",
            "--example",
            "bench",
            "--",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--codemode")
        .arg(&codemode)
        .current_dir(&root);
    if let Some(python) = install_monty(&root) {
        bench.arg("--monty-python").arg(python);
    }
    run(&mut bench)
}

/// The pydantic-monty release the bench measures beside (its yardstick): pinned, so that a
/// comparison over time compares codemode, not Monty.
const MONTY_VERSION: &str = "1.4.0";

/// Installs pydantic-monty [`MONTY_VERSION`] from PyPI into its own virtual environment under
/// `target/bench/monty`, once; the environment's Python, or `None` (saying why) when Python or
/// PyPI is out of reach, and the bench leaves its table out.
fn install_monty(root: &Path) -> Option<PathBuf> {
    let venv = root.join("target/bench/monty");
    let python = venv.join("bin/python");
    let installed = venv.join(format!("installed-{MONTY_VERSION}"));
    if installed.exists() {
        return Some(python);
    }
    let mut make_venv = Command::new("python3");
    make_venv.args(["-m", "venv", "--clear"]).arg(&venv);
    let mut install = Command::new(&python);
    install.args(["-m", "pip", "install", "--quiet"]);
    install.arg(format!("pydantic-monty=={MONTY_VERSION}"));
    for mut step in [make_venv, install] {
        if let Err(error) = run(&mut step) {
            eprintln!("the bench goes on without pydantic-monty: {error}");
            return None;
        }
    }
    let _ = std::fs::write(&installed, "");
    Some(python)
}

fn run(command: &mut Command) -> Result<(), String> {
    let description = format!("{command:?}");
    let status = command
        .status()
        .map_err(|error| format!("cannot run {description}: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{description} failed with {status}"))
    }
}
