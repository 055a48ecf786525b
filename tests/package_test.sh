#!/usr/bin/env bash
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# The .deb of `make package` (cmake/package.cmake): its control fields and files, unpacked into
# a scratch root (dpkg-deb -x, nothing installed on the machine), every library libddp.so needs
# provided by a package its Depends names (or one those pull in), the versions the CMake package
# and pkg-config give equal to VERSION, then examples/cpp, examples/c and examples/ps built
# against that root with find_package(ddp) and pkg-config and run as real jobs
# (tests/install_test.sh --prefix).
#
#   tests/package_test.sh [DEB]      (default: dist/libddp-dev_<VERSION>_amd64.deb)
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
version=$(cat "$source_dir/VERSION")
deb=${1:-$source_dir/dist/libddp-dev_${version}_$(dpkg --print-architecture).deb}
[ -f "$deb" ] || { echo "package test: no $deb (make package)" >&2; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
[ "$(dpkg-deb -f "$deb" Package)" = libddp-dev ] || { echo "package test: not libddp-dev" >&2; exit 1; }
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || { echo "package test: not version $version" >&2; exit 1; }
dpkg-deb -x "$deb" "$root"
libdir=$root/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for f in "$libdir/libddp.so.$version" "$libdir/libddp.so" "$root/usr/include/ddp/ddp.h" \
         "$root/usr/include/ddp/version.h" "$libdir/cmake/ddp/ddpConfig.cmake" \
         "$libdir/pkgconfig/ddp.pc"; do
  [ -e "$f" ] || { echo "package test: the package has no ${f#"$root"}" >&2; exit 1; }
done
if dpkg-deb -c "$deb" | grep -E '/(ddp|tests?|bin)/.*\.py$'; then
  echo "package test: Python files in the C++ package" >&2; exit 1
fi

clauses=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/^ *//')  # one clause a line
# Every Depends clause is met by this machine's packages (what `apt install ./the.deb` would
# need; the package is only unpacked here).
declare -A ops=(["<<"]=lt ["<="]=le ["="]=eq [">="]=ge [">>"]=gt)  # dpkg --compare-versions's
while read -r clause; do
  [ -n "$clause" ] || continue
  pkg=${clause%% *}
  have=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
  [ -n "$have" ] || { echo "package test: Depends names $pkg, not installed here" >&2; exit 1; }
  if [[ $clause =~ \((\<\<|\<=|=|\>=|\>\>)\ ([^\)]+)\) ]]; then
    op=${BASH_REMATCH[1]}
    want=${BASH_REMATCH[2]}
    dpkg --compare-versions "$have" "${ops[$op]}" "$want" ||
      { echo "package test: Depends $clause, and $pkg here is $have" >&2; exit 1; }
  fi
  echo "Depends $clause: $pkg $have"
done <<<"$clauses"

# Depends, and what those packages depend on in turn (libabsl-dev brings Abseil's libraries).
depends=$(sed -E 's/\(.*\)//; s/ //g' <<<"$clauses" | sort -u | tr '\n' ' ')
allowed=$depends
for p in $depends; do
  # (a package not installed here adds nothing: the check below then names what is missing)
  allowed="$allowed $({ dpkg-query -W -f='${Depends}' "$p" 2>/dev/null || true; } | tr ',' '\n' | sed -E 's/\(.*\)//; s/\|.*//; s/ //g' | tr '\n' ' ')"
done
for lib in $(readelf -d "$libdir/libddp.so.$version" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p'); do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && !found { print $NF; found = 1 }')
  [ -n "$path" ] || { echo "package test: $lib, which libddp.so needs, is not on this machine" >&2; exit 1; }
  # dpkg knows a file by the path its package installed (/lib or /usr/lib: merged /usr).
  owner=$({ dpkg -S "$path" || dpkg -S "$(readlink -f "$path")" || true; } 2>/dev/null | sed -n '1s/:.*//p')
  echo "libddp.so needs $lib: $path, from $owner"
  [[ " $allowed " == *" $owner "* ]] ||
    { echo "package test: $owner (for $lib) is not among the Depends: $depends" >&2; exit 1; }
done

# The file's first PACKAGE_VERSION (a later one appends "(64bit)" for a caller of another width).
cmake_version=$(grep -m 1 -oE 'set\(PACKAGE_VERSION "[^"$]+"\)' "$libdir/cmake/ddp/ddpConfigVersion.cmake" |
  sed -E 's/.*"([^"]+)".*/\1/')
pc_version=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion ddp)
echo "package test: the CMake package says $cmake_version, pkg-config $pc_version, VERSION $version"
[ "$cmake_version" = "$version" ] || { echo "package test: the CMake package is not $version" >&2; exit 1; }
[ "$pc_version" = "$version" ] || { echo "package test: ddp.pc is not $version" >&2; exit 1; }

"$source_dir/tests/install_test.sh" --prefix "$root/usr" "$source_dir"
echo "package test: $(basename "$deb") ($(du -h "$deb" | cut -f1)) unpacked and built against"
