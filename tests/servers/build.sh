#!/usr/bin/env bash
# Builds the newest release of a server from Debian's source packages, for the test matrix.
#
#   tests/servers/build.sh redis 8     # the newest Redis 8.x in Debian's archive
#   tests/servers/build.sh redis 8.0   # the newest Redis 8.0.x
#   tests/servers/build.sh valkey 9    # the newest Valkey 9.x
#   tests/servers/build.sh valkey 8    # the newest Valkey 8.x (Debian 13's)
#
# Prints the path of the built server binary (its cli sits beside it). Binaries are cached in
# target/servers/<package>-<version>/, so a second run only looks the version up.
#
# The archive's address comes from this machine's own apt configuration
# (/etc/apt/sources.list.d/debian.sources); the source lists of sid, experimental and trixie
# (Debian 13, whose Valkey 8 sid no longer has) are kept in a private apt state under
# target/servers/apt, so the system's apt setup is left unchanged.
# Needs apt-get, curl-free network access to that archive, a C toolchain and make.
set -euo pipefail

package=${1:?usage: build.sh redis|valkey MAJOR[.MINOR]}
major=${2:?usage: build.sh redis|valkey MAJOR[.MINOR]}
root=$(cd "$(dirname "$0")/../.." && pwd)
cache="$root/target/servers"
apt_dir="$cache/apt"
log() { echo "build.sh: $*" >&2; }

# The newest cached build of this major, if any: the fallback when the archive is out of reach.
cached_build() {
  local dir
  dir=$(ls -d "$cache/$package-$major".* 2>/dev/null | sort -V | tail -n 1) || true
  [ -n "$dir" ] && [ -x "$dir/$package-server" ] && echo "$dir/$package-server"
}

archive_uri() {
  local sources=/etc/apt/sources.list.d/debian.sources uri=""
  if [ -f "$sources" ]; then
    # The first URI of a stanza whose suites are not the security ones.
    uri=$(awk '
      /^URIs:/ { uris = $2 }
      /^Suites:/ { if ($0 !~ /security/ && uris != "" && found == "") found = uris }
      /^$/ { uris = "" }
      END { print found }' "$sources")
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || { log "no Debian archive address in this machine's apt configuration"; return 1; }
  echo "$uri"
}

apt_private() {
  apt-get -q -o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache" \
    -o Debug::NoLocking=true -o APT::Sandbox::User=root "$@"
}

# Looks up the newest version of the source package in sid, experimental and trixie.
newest_version() {
  local uri keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  uri=$(archive_uri) || return 1
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  {
    echo "deb-src [signed-by=$keyring] $uri sid main"
    echo "deb-src [signed-by=$keyring] $uri experimental main"
    echo "deb-src [signed-by=$keyring] $uri trixie main"
  } > "$apt_dir/sources.list"
  apt_private update >&2 || return 1
  apt-cache -o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache" showsrc "$package" |
    awk '/^Version:/ { print $2 }' |
    while read -r version; do
      upstream=${version#*:}
      upstream=${upstream%-*}
      case $upstream in "$major".*) echo "$upstream $version" ;; esac
    done | sort -V | tail -n 1
}

command -v apt-get >/dev/null || { log "apt-get is needed to fetch Debian's source packages"; exit 1; }
if ! found=$(newest_version) || [ -z "$found" ]; then
  if build=$(cached_build); then
    log "the archive is out of reach: using the cached $build"
    echo "$build"
    exit 0
  fi
  log "no $package $major.x source package found in Debian's sid, experimental or trixie"
  exit 1
fi
read -r upstream version <<<"$found"
out="$cache/$package-$upstream"
if [ -x "$out/$package-server" ] && [ -x "$out/$package-cli" ]; then
  echo "$out/$package-server"
  exit 0
fi

work="$cache/build/$package-$upstream"
rm -rf "$work"
mkdir -p "$work"
log "fetching $package $version"
# Only the upstream tarball is built (apt checks it against the signed index's hashes); a
# packaging file the archive lacks (a .dsc or .debian.tar missing from a mirror) does not
# stop the build.
(cd "$work" && apt_private source --download-only "$package=$version" >&2) ||
  log "apt-get source reported an error; going on if the upstream tarball arrived"
tarball=$(ls "$work/${package}_$upstream".orig.tar.* 2>/dev/null | head -n 1) || true
[ -n "$tarball" ] || { log "the upstream tarball of $package $version did not arrive"; exit 1; }
tar -xf "$tarball" -C "$work"
source_dir=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
log "building $package $upstream in $source_dir (a few minutes)"
make -C "$source_dir" -j"$(nproc)" BUILD_TLS=no BUILD_WITH_MODULES=no >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log" >&2
  log "the build failed; the whole log is $work/build.log"
  exit 1
}
mkdir -p "$out.partial"
cp "$source_dir/src/$package-server" "$source_dir/src/$package-cli" "$out.partial/"
rm -rf "$out" && mv "$out.partial" "$out"
rm -rf "$work"
echo "$out/$package-server"
