//! `setup-v8`: Debian's V8 (inside `libnode108`) unpacked into the workspace's `.v8/` and copied
//! to the per-user folder the launcher searches; and the facts about that V8 that `dist` needs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::shell::{copy, replace_folder, run, workspace_root};

/// The Debian packages that carry V8's shared library, its headers, and the library's own
/// dependencies that a fresh machine may lack.
const V8_PACKAGES: [&str; 4] = ["libnode108", "libnode-dev", "libuv1", "libc-ares2"];

/// The V8 these packages carry; the build refuses any other headers.
const EXPECTED_V8: &str = "10.2";

/// Where V8 goes: `CODEMODE_V8_PREFIX` if set, else `.v8/` at the workspace root.
pub(crate) fn v8_prefix() -> PathBuf {
    std::env::var_os("CODEMODE_V8_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".v8"))
}

/// The folder of the unpacked libraries inside a V8 prefix.
pub(crate) const PREFIX_LIB: &str = "usr/lib/x86_64-linux-gnu";

/// The run-time libraries of V8 that a base system lacks, as their sonames, with the Debian
/// package each comes from.
pub(crate) const V8_RUNTIME_LIBRARIES: [(&str, &str); 3] = [
    ("libnode.so.108", "libnode108"),
    ("libuv.so.1", "libuv1"),
    ("libcares.so.2", "libc-ares2"),
];

pub(crate) fn setup_v8() -> Result<(), String> {
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
    Ok(crate::shell::user_data_folder()?.join("v8"))
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
    replace_folder(&staging, &destination)?;
    println!(
        "V8's libraries installed for this user in {}",
        destination.display()
    );
    Ok(())
}

/// Copies a library into `staging/lib` and its package's copyright file into `staging/licenses`.
pub(crate) fn stage_library(
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
