# shellcheck shell=bash
# Sourced by serve.sh and test.sh: the system packages the build needs (OpenSSL's headers and
# pkg-config for the TLS crate, nvmf-tls). Installed with apt where we may (root); elsewhere a
# clear message names them.
ebof_build_deps() {
    if pkg-config --exists openssl 2>/dev/null; then
        return 0
    fi
    local pkgs=(libssl-dev pkg-config)
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing build dependencies: ${pkgs[*]}" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; }
    fi
    if ! pkg-config --exists openssl 2>/dev/null; then
        echo "OpenSSL development files not found: install ${pkgs[*]} (Debian/Ubuntu) or openssl-devel pkgconf (Fedora)" >&2
        return 1
    fi
}
