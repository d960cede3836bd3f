//! Puts the system V8 that `codemode-runtime-v8` links on the `codemode` binary's run path, so
//! the binary runs outside cargo too. That crate exports its library folder as `links` metadata.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_NODE_LIB_DIR");
    if let Ok(lib_dir) = std::env::var("DEP_NODE_LIB_DIR") {
        // Old-style RPATH, so libnode's own dependencies beside it are found too.
        println!("cargo:rustc-link-arg=-Wl,--disable-new-dtags,-rpath,{lib_dir}");
    }
}
