//! Compiles the C++ shim against the system V8 set up by `cargo xtask setup-v8`, and links it.
//!
//! V8 is looked for in `CODEMODE_V8_PREFIX`, else in `.v8/` at the workspace root. The system-wide
//! Node.js headers are never used: they belong to a different V8.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=shim/shim.cc");
    println!("cargo:rerun-if-env-changed=CODEMODE_V8_PREFIX");
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let default_prefix = manifest_dir.join("../.v8");
    let prefix = std::env::var_os("CODEMODE_V8_PREFIX")
        .map(PathBuf::from)
        .unwrap_or(default_prefix);
    let include = prefix.join("usr/include/node");
    let lib = prefix.join("usr/lib/x86_64-linux-gnu");
    println!(
        "cargo:rerun-if-changed={}",
        include.join("v8-version.h").display()
    );
    if !include.join("v8-version.h").exists() || !lib.join("libnode.so.108").exists() {
        fail(&prefix);
    }
    let lib = lib.canonicalize().unwrap_or(lib);
    println!("cargo:rerun-if-changed=shim/attack_probe.cc");
    let mut build = cc::Build::new();
    // The native attack probe exists only in test builds (the `test-hooks` feature).
    if std::env::var_os("CARGO_FEATURE_TEST_HOOKS").is_some() {
        build.file("shim/attack_probe.cc");
    }
    build
        .cpp(true)
        .file("shim/shim.cc")
        .include(&include)
        .flag("-std=c++17")
        .flag("-pthread")
        // libnode is built without RTTI; a subclass of a V8 class must be too.
        .flag("-fno-rtti")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(true)
        .compile("codemode_v8_shim");
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
