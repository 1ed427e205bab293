#!/usr/bin/env bash
# The GPU bundle: what a CUDA build of trident needs that a bare GPU image lacks (it has nvcc,
# cuBLASLt, the NCCL wheel, gcc, python3, meson and ninja, but no Debian development packages and
# no network), as a self-contained, relocatable prefix made from Debian packages that are
# downloaded (`apt-get download`), never installed:
#   DIR/debs/     the downloaded .deb files (a cache: a package already there is not fetched again)
#   DIR/prefix/   the prefix: include/, lib/ (.so files, lib/ucx/ modules), lib/pkgconfig/ (the
#                 packages' .pc files rewritten to prefix=${pcfiledir}/../.., so the prefix works
#                 wherever it is unpacked), bin/pkg-config (the bundle's own pkgconf),
#                 share/fortunes/ (the demo corpus), MANIFEST
#   DIR/carry/trident-gpu-bundle.tar.gz   the prefix compressed: the one thing that travels to
#                 the GPU machine (name DIR/carry in the device tool's carry list);
#                 scripts/gpu-check.sh unpacks it there.
# What goes in follows meson.build: every dependency('NAME') of the project's meson.build files is
# a pkg-config module whose development package (found with dpkg -S, or the table below) and
# runtime libraries (apt-cache depends, then the ELF closure: every NEEDED library that is not
# glibc's, libgcc's or libstdc++'s is carried too) are bundled; libraries nothing needs (LAPACK,
# PCRE2's 16/32-bit variants, UCX's InfiniBand modules) are left out. The bundle is verified
# before it is packed: each module resolves from the bundle alone, each -lNAME is a file in it,
# and every NEEDED library resolves inside it. Prints the sizes; the archive must stay under
# 40 MiB (working tree + bundle <= 64 MiB on the device machine).
#   scripts/gpu-bundle.sh [--dir DIR] [--offline]
#     --offline: use DIR/debs as it is (fail naming what is missing instead of downloading)
# Needs: apt-get, apt-cache, dpkg-deb (Debian 12); pkg-config modules of meson.build installed
# here (scripts/setup.sh) so that dpkg -S can name their packages.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dir=.gpu
offline=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --offline) offline=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-bundle: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
limit_mib=40
arch=$(dpkg --print-architecture)
triplet=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)

# pkg-config modules that are not Debian packages (meson's own dependencies) or not for the GPU
skip_modules='^(threads|openmp|cuda|mpi|dl|intl|iconv)$'
# module -> development package, where dpkg -S cannot tell (the module is not installed here)
declare -A module_pkg=([yaml-0.1]=libyaml-dev [openblas]=libopenblas-pthread-dev [ucx]=libucx-dev
  [cmocka]=libcmocka-dev [jansson]=libjansson-dev [libpcre2-8]=libpcre2-dev
  [libutf8proc]=libutf8proc-dev [zlib]=zlib1g-dev [libzstd]=libzstd-dev)
# what every GPU image has (glibc, libgcc, libstdc++): never carried
base_sonames='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libgcc_s\.so\.1|libstdc\+\+\.so\.6)$'
base_packages='^(libc6|libgcc-s1|libstdc\+\+6|gcc-12-base|libc-dev|libc6-dev)$'
# always carried: pkg-config itself, and the demo corpus (configs/tiny*.yaml's data)
extra_packages=(pkgconf-bin libpkgconf3 fortunes fortunes-min)

die() { echo "gpu-bundle: $*" >&2; exit 1; }

# ---- 1. which modules, which packages
mapfile -t modules < <(find . -name meson.build -not -path './build*' -not -path './.*' \
  -exec grep -hoE "dependency\(\s*'[^']+'" {} + | sed -E "s/.*'([^']+)'/\1/" |
  grep -vE "$skip_modules" | sort -u)
[ ${#modules[@]} -gt 0 ] || die "no dependency('...') found in meson.build files"
dev_packages=() kept_modules=()
for m in "${modules[@]}"; do
  p=""
  if pc=$(pkg-config --path "$m" 2>/dev/null); then
    p=$(dpkg -S "$(readlink -f "$pc")" 2>/dev/null | sed -n 1p | cut -d: -f1) || true
  fi
  [ -n "$p" ] || p=${module_pkg[$m]:-}
  if [ -z "$p" ]; then
    # an optional dependency not installed here, or a new one: the CUDA build against the
    # bundle (tests/gpu_bundle) fails at configure if the build needs it
    echo "gpu-bundle: WARNING: pkg-config module '$m' (meson.build) is neither installed here nor in module_pkg of $0: left out" >&2
    continue
  fi
  dev_packages+=("$p")
  kept_modules+=("$m")
done
modules=("${kept_modules[@]}")
mapfile -t dev_packages < <(printf '%s\n' "${dev_packages[@]}" | sort -u)
runtime_packages=()
for p in "${dev_packages[@]}"; do
  while read -r dep; do
    case "$dep" in '<'*|*-dev) continue ;; esac
    [[ "$dep" =~ $base_packages ]] && continue
    runtime_packages+=("${dep%:$arch}")
  done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
             --no-replaces --no-enhances "$p" 2>/dev/null | awk '/^ *(Pre)?Depends:/ {print $2}')
done
packages=("${dev_packages[@]}" "${runtime_packages[@]}" "${extra_packages[@]}")

# ---- 2. download (cached in DIR/debs)
mkdir -p "$dir/debs"
have_deb() { compgen -G "$dir/debs/${1}_*.deb" >/dev/null; }
fetch() { # PACKAGE...: download the ones not cached
  local want=() p
  for p in "$@"; do have_deb "$p" || want+=("$p"); done
  [ ${#want[@]} -eq 0 ] && return 0
  [ $offline -eq 0 ] || die "--offline: not in $dir/debs: ${want[*]}"
  echo "gpu-bundle: downloading ${want[*]}"
  local sandbox=()
  [ "$(id -u)" -ne 0 ] || sandbox=(-o APT::Sandbox::User=root)
  if ! (cd "$dir/debs" && apt-get "${sandbox[@]}" -q download "${want[@]}" >/dev/null); then
    # no package lists here (a fresh image): fetch them into the cache folder, not /var/lib/apt
    mkdir -p "$dir/apt-lists/partial"
    local lists=(-o Dir::State::Lists="$dir/apt-lists" -o Debug::NoLocking=1)
    apt-get "${sandbox[@]}" "${lists[@]}" -q update >/dev/null ||
      die "apt-get update failed (no network to the Debian mirrors?)"
    (cd "$dir/debs" && apt-get "${sandbox[@]}" "${lists[@]}" -q download "${want[@]}" >/dev/null) ||
      die "apt-get download ${want[*]} failed"
  fi
}

# ---- 3. unpack into a staging tree, arrange the prefix, close over NEEDED libraries
stage=$dir/stage
prefix=$dir/prefix
soname_of() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'; }
needed_of() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

assemble() {
  rm -rf "$stage" "$prefix"
  mkdir -p "$stage" "$prefix"/{bin,libexec,include,lib/pkgconfig,lib/ucx,share}
  local p f
  for p in "${packages[@]}"; do
    f=$(compgen -G "$dir/debs/${p}_*.deb" | sort -V | tail -1)
    dpkg-deb -x "$f" "$stage"
  done
  local u=$stage/usr
  # libraries: the multiarch folder, flattened (OpenBLAS's alternative folder included)
  for d in "$stage/lib/$triplet" "$u/lib/$triplet" "$u/lib/$triplet"/openblas-*; do
    [ -d "$d" ] || continue
    find "$d" -maxdepth 1 \( -type f -o -type l \) -name 'lib*.so*' -exec cp -a {} "$prefix/lib/" \;
    [ -d "$d/pkgconfig" ] && cp -a "$d"/pkgconfig/*.pc "$prefix/lib/pkgconfig/" 2>/dev/null || true
  done
  [ -d "$u/lib/$triplet/ucx" ] && find "$u/lib/$triplet/ucx" -maxdepth 1 -name 'lib*.so*' -exec cp -a {} "$prefix/lib/ucx/" \;
  [ -d "$u/share/pkgconfig" ] && cp -a "$u"/share/pkgconfig/*.pc "$prefix/lib/pkgconfig/" 2>/dev/null || true
  # headers: /usr/include, with the multiarch (and OpenBLAS) folders merged into it
  [ -d "$u/include" ] && cp -a "$u/include/." "$prefix/include/"
  if [ -d "$prefix/include/$triplet" ]; then
    for d in "$prefix/include/$triplet"/openblas-*; do
      [ -d "$d" ] && cp -a "$d/." "$prefix/include/"
    done
    rm -rf "$prefix/include/$triplet"
  fi
  # pkg-config itself: the binary in libexec/, a wrapper that finds its library in bin/
  cp -a "$u/bin/pkgconf" "$prefix/libexec/pkgconf"
  cat >"$prefix/bin/pkg-config" <<'EOF'
#!/bin/sh
# The bundle's pkg-config (Debian's pkgconf); looks only at the bundle's .pc files unless
# PKG_CONFIG_LIBDIR says otherwise.
here=$(cd "$(dirname "$0")/.." && pwd)
PKG_CONFIG_LIBDIR=${PKG_CONFIG_LIBDIR:-$here/lib/pkgconfig} \
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/libexec/pkgconf" "$@"
EOF
  chmod +x "$prefix/bin/pkg-config"
  # the demo corpus: the fortune files (no .dat indexes, no .u8 links)
  if [ -d "$u/share/games/fortunes" ]; then
    mkdir -p "$prefix/share/fortunes"
    find "$u/share/games/fortunes" -maxdepth 1 -type f ! -name '*.dat' -exec cp {} "$prefix/share/fortunes/" \;
  fi
  # static libraries are not needed (the .so files are); neither are the debug links
  find "$prefix" -name '*.a' -delete
}

# .pc files: relocatable (prefix from the file's own folder), every /usr path into the prefix
rewrite_pc() {
  local pc
  for pc in "$prefix"/lib/pkgconfig/*.pc; do
    sed -i -E \
      -e "s#/usr/lib/$triplet/openblas-[a-z]+/?#@P@/lib/#g" \
      -e "s#/usr/include/$triplet/openblas-[a-z]+/?#@P@/include/#g" \
      -e "s#\\$\\{prefix\\}/lib/$triplet/openblas-[a-z]+#\${prefix}/lib#g" \
      -e "s#\\$\\{prefix\\}/include/$triplet/openblas-[a-z]+#\${prefix}/include#g" \
      -e "s#\\$\\{prefix\\}/lib/$triplet#\${prefix}/lib#g" \
      -e "s#\\$\\{prefix\\}/include/$triplet#\${prefix}/include#g" \
      -e "s#/usr/lib/$triplet#@P@/lib#g" \
      -e "s#/usr/include/$triplet#@P@/include#g" \
      -e "s#/usr/include#@P@/include#g" \
      -e "s#^prefix[[:space:]]*=.*#prefix=\${pcfiledir}/../..#" \
      -e "s#@P@#\${prefix}#g" "$pc"
    grep -q '^prefix[[:space:]]*=' "$pc" || sed -i '1i prefix=${pcfiledir}/../..' "$pc"
    if grep -n '/usr' "$pc" | grep -v '^[0-9]*:#' >/dev/null; then
      die "$(basename "$pc") still names /usr after rewriting: $(grep -n '/usr' "$pc" | head -3)"
    fi
  done
}

pkgconf_b() { PKG_CONFIG_LIBDIR="$prefix/lib/pkgconfig" PKG_CONFIG_PATH= "$prefix/bin/pkg-config" "$@"; }

# The libraries to keep: each module's -lNAME, the UCX modules whose needs are met, and
# everything they need; prints "missing SONAME" for a NEEDED library that is neither carried
# nor in the base set. Removes the rest.
close_libs() {
  local -A keep=() seen=()
  local queue=() m l f so n
  for m in "${modules[@]}"; do
    for l in $(pkgconf_b --libs-only-l "$m" 2>/dev/null); do
      f="$prefix/lib/lib${l#-l}.so"
      [ -e "$f" ] && queue+=("$(basename "$(readlink -f "$f")")")
    done
  done
  for f in "$prefix"/lib/ucx/lib*.so.*.*; do
    [ -f "$f" ] || continue
    local ok=1
    for n in $(needed_of "$f"); do
      [[ "$n" =~ $base_sonames ]] || [ -e "$prefix/lib/$n" ] || ok=0
    done
    if [ $ok -eq 1 ]; then
      for n in $(needed_of "$f"); do [ -e "$prefix/lib/$n" ] && queue+=("$(basename "$(readlink -f "$prefix/lib/$n")")"); done
    else
      so=$(basename "$f"); so=${so%%.so*}
      rm -f "$prefix/lib/ucx/$so".so* "$prefix/lib/pkgconfig/ucx-${so#libuct_}.pc"
    fi
  done
  # pkgconf's own library
  queue+=($(for n in $(needed_of "$prefix/libexec/pkgconf"); do [ -e "$prefix/lib/$n" ] && basename "$(readlink -f "$prefix/lib/$n")"; done))
  while [ ${#queue[@]} -gt 0 ]; do
    f=${queue[0]}; queue=("${queue[@]:1}")
    [ -n "${seen[$f]:-}" ] && continue
    seen[$f]=1; keep[$f]=1
    for n in $(needed_of "$prefix/lib/$f"); do
      [[ "$n" =~ $base_sonames ]] && continue
      if [ -e "$prefix/lib/$n" ]; then
        queue+=("$(basename "$(readlink -f "$prefix/lib/$n")")")
      else
        echo "missing $n"
      fi
    done
  done
  # remove libraries outside the closure (and links to them)
  for f in "$prefix"/lib/lib*.so*; do
    [ -f "$f" ] && [ ! -L "$f" ] && [ -z "${keep[$(basename "$f")]:-}" ] && rm -f "$f"
  done
  find "$prefix/lib" -xtype l -delete
  # .pc files of libraries left out (LAPACK, PCRE2-16/32, ...)
  local pc
  for pc in "$prefix"/lib/pkgconfig/*.pc; do
    m=$(basename "$pc" .pc)
    for l in $(pkgconf_b --libs-only-l "$m" 2>/dev/null); do
      case "$l" in -lm|-lpthread|-ldl|-lrt|-lc) continue ;; esac
      [ -e "$prefix/lib/lib${l#-l}.so" ] || { rm -f "$pc"; break; }
    done
  done
}

# libraries an earlier run found the packages to need (step 3 below): fetched with the rest
[ -f "$dir/debs/extra-packages" ] && mapfile -t -O ${#packages[@]} packages <"$dir/debs/extra-packages"
fetch "${packages[@]}"
for round in 1 2 3 4 5; do
  assemble
  rewrite_pc
  missing=$(close_libs | awk '/^missing/ {print $2}' | sort -u)
  [ -z "$missing" ] && break
  # a library the packages need but do not depend on in apt's view: its package from this system
  more=()
  for so in $missing; do
    path=$(ldconfig -p | awk -v s="$so" '$1 == s && /x86-64/ && !p {p = $NF} END {print p}')
    p=""
    [ -n "$path" ] && p=$(dpkg -S "$path" 2>/dev/null | sed -n 1p | cut -d: -f1) || true
    [ -z "$p" ] && [ -n "$path" ] && p=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | sed -n 1p | cut -d: -f1) || true
    [ -n "$p" ] || die "no package for $so (needed by the bundle's libraries) is installed here to name it"
    more+=("$p")
  done
  echo "gpu-bundle: the libraries also need: ${more[*]}"
  packages+=("${more[@]}")
  printf '%s\n' "${more[@]}" >>"$dir/debs/extra-packages"
  fetch "${more[@]}"
  [ $round -lt 5 ] || die "the NEEDED closure did not settle: $missing"
done

# ---- 4. verify: every module from the bundle alone, each -lNAME a file in it
for m in "${modules[@]}"; do
  pkgconf_b --exists "$m" || die "module $m does not resolve from the bundle: $(pkgconf_b --print-errors --exists "$m" 2>&1 | head -3)"
  for flag in $(pkgconf_b --cflags-only-I "$m"); do
    d=$(readlink -f "${flag#-I}")
    [ -d "$d" ] && [[ "$d" == "$(readlink -f "$prefix")"* ]] || die "$m: include folder ${flag#-I} is not in the bundle"
  done
  for l in $(pkgconf_b --libs-only-l "$m"); do
    case "$l" in -lm|-lpthread|-ldl|-lrt|-lc) continue ;; esac
    [ -e "$prefix/lib/lib${l#-l}.so" ] ||
      die "$m: $l has no lib${l#-l}.so in the bundle"
  done
done

# ---- 4b. cuDNN's headers and its frontend's (header-only C++) for the CUDA build's cuDNN
# attention, in cudnn/include/ (gpu_check.py passes it as -Dcudnn_include; the GPU image's
# cuDNN wheel may hold the library without its headers; the frontend's headers include each
# other as ../include/NAME, so the folder is named include); left out, with a warning, where
# this machine has either missing (scripts/setup.sh fetches the frontend's)
rm -rf "$prefix/cudnn"
cudnn_h=$(ls /usr/local/cuda/include/cudnn*.h 2>/dev/null || true)
if [ -n "$cudnn_h" ] && [ -f "$root/.deps/cudnn-frontend/include/cudnn_frontend.h" ]; then
  mkdir -p "$prefix/cudnn/include"
  cp $cudnn_h "$prefix/cudnn/include/"
  cp -a "$root/.deps/cudnn-frontend/include/." "$prefix/cudnn/include/"
  cudnn_note="cudnn headers $(awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) / {printf "%s%s", s, $3; s="."}' /usr/local/cuda/include/cudnn_version.h), frontend $(cat "$root/.deps/cudnn-frontend/VERSION")"
else
  echo "gpu-bundle: WARNING: no cuDNN headers (/usr/local/cuda/include/cudnn.h) or frontend (.deps/cudnn-frontend: scripts/fetch_cudnn_frontend.py): the GPU build leaves cuDNN's attention out" >&2
  cudnn_note="no cudnn headers"
fi

# ---- 5. manifest, archive, sizes
rm -rf "$stage"
{
  echo "trident GPU bundle (scripts/gpu-bundle.sh), made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME") $arch"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "modules ${modules[*]}"
  echo "$cudnn_note"
  for f in "$dir"/debs/*.deb; do
    p=$(dpkg-deb -f "$f" Package)
    printf '%s\n' "${packages[@]}" | grep -qx "$p" && echo "package $p $(dpkg-deb -f "$f" Version)"
  done
} >"$prefix/MANIFEST"
mkdir -p "$dir/carry"
archive=$dir/carry/trident-gpu-bundle.tar.gz
rm -f "$archive"
tar -C "$dir" -cf - prefix | gzip -9 >"$archive"
prefix_b=$(du -sb "$prefix" | cut -f1)
archive_b=$(stat -c %s "$archive")
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "gpu-bundle: modules ${modules[*]}"
echo "gpu-bundle: packages $(grep -c '^package ' "$prefix/MANIFEST"): $(awk '/^package/ {printf "%s ", $2}' "$prefix/MANIFEST")"
echo "gpu-bundle: prefix $prefix: $(mib "$prefix_b") unpacked"
echo "gpu-bundle: archive ${archive#"$root"/}: $(mib "$archive_b") (limit $limit_mib MiB) - carry ${dir#"$root"/}/carry"
[ "$archive_b" -lt $((limit_mib * 1048576)) ] || die "the archive is $(mib "$archive_b"), over $limit_mib MiB"
