//! Link to libpowerinfer. Two ways, tried in order:
//!   1. PI_LIB_DIR=/path/to/dir/with/libpowerinfer.so (e.g. a Meson build's lib/): link
//!      from there and put the directory in the rpath so tests and examples run in place;
//!   2. `pkg-config --libs-only-L --libs-only-l powerinfer` (an installed library, or
//!      PKG_CONFIG_PATH pointing at a staged install's pkgconfig directory).
use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=PI_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");

    if let Some(dir) = env::var_os("PI_LIB_DIR").filter(|d| !d.is_empty()) {
        let dir = dir.to_string_lossy().into_owned();
        println!("cargo:rustc-link-search=native={dir}");
        println!("cargo:rustc-link-lib=dylib=powerinfer");
        add_rpath(&dir);
        return;
    }

    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_owned());
    let output =
        Command::new(&pkg_config).args(["--libs-only-L", "--libs-only-l", "powerinfer"]).output();
    let flags = match output {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => fail(&format!(
            "`{pkg_config} --libs powerinfer` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => fail(&format!("cannot run `{pkg_config}`: {e}")),
    };
    let mut linked = false;
    for flag in flags.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
            add_rpath(dir);
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
            linked |= lib == "powerinfer";
        }
    }
    if !linked {
        fail(&format!("`{pkg_config} --libs powerinfer` did not name -lpowerinfer: {flags}"));
    }
}

/// Let test and example binaries find the library without LD_LIBRARY_PATH.
fn add_rpath(dir: &str) {
    if env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os != "windows") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}

fn fail(why: &str) -> ! {
    panic!(
        "\n\ncannot find libpowerinfer: {why}\n\
         Either set PI_LIB_DIR to the directory holding libpowerinfer.so (for a Meson \
         build: PI_LIB_DIR=/path/to/build/lib), or install the library so that \
         `pkg-config --libs powerinfer` works (for a staged install, point \
         PKG_CONFIG_PATH at its lib/<triplet>/pkgconfig directory).\n\n"
    )
}
