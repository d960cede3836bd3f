//! Compiles the test-only native attack probe (`native/attack_probe.cc`) in builds with the
//! `test-hooks` feature; other builds compile no native code.

fn main() {
    println!("cargo:rerun-if-changed=native/attack_probe.cc");
    if std::env::var_os("CARGO_FEATURE_TEST_HOOKS").is_some() {
        cc::Build::new()
            .cpp(true)
            .file("native/attack_probe.cc")
            .flag("-std=c++17")
            .flag("-pthread")
            .flag_if_supported("-Wno-unused-parameter")
            .warnings(true)
            .compile("codemode_attack_probe");
        println!("cargo:rustc-link-lib=dylib=stdc++");
    }
}
