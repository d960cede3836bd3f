//! Gives `codemode-v8` a run path relative to itself (`$ORIGIN/../lib` and `$ORIGIN/lib`, where a
//! release tarball puts V8), and no absolute one: the launcher `codemode` finds V8 everywhere
//! else. The launcher gets no run path at all.

fn main() {
    println!(
        "cargo:rustc-link-arg-bin=codemode-v8=-Wl,--disable-new-dtags,-rpath,$ORIGIN/../lib:$ORIGIN/lib"
    );
}
