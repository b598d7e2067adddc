# shellcheck shell=bash
# Sourced by serve.sh and test.sh: the system packages the build needs — OpenSSL's headers and
# pkg-config for the TLS crate (nvmf-tls); cmake, a C compiler and libclang for rdma-mummy-sys
# (nvmf-rdma: it generates the libibverbs/librdmacm bindings with bindgen and builds the small
# dlopen shim with cmake; rdma-core itself is NOT needed to build or run). Installed with apt
# where we may (root); elsewhere a clear message names them.
_ebof_deps_ok() {
    pkg-config --exists openssl 2>/dev/null && command -v cmake >/dev/null 2>&1 &&
        command -v cc >/dev/null 2>&1 &&
        { ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; }
}
ebof_build_deps() {
    if _ebof_deps_ok; then
        return 0
    fi
    local pkgs=(libssl-dev pkg-config cmake libclang-dev build-essential)
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing build dependencies: ${pkgs[*]}" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; }
    fi
    if ! _ebof_deps_ok; then
        echo "build dependencies not found: install ${pkgs[*]} (Debian/Ubuntu) or openssl-devel pkgconf cmake clang-devel gcc (Fedora)" >&2
        return 1
    fi
}
