#!/usr/bin/env bash
# Start a gpuipc plugin outside this repository from plugin-api/template (docs/writing-plugins.md):
#
#   scripts/new-plugin.sh NAME DIR
#
# copies the template to DIR (which must not exist), names the crate gpuipc-NAME (its library
# libgpuipc_NAME.so, with `-` as `_`, which `plugin = "NAME"` finds) and the plugin NAME, and
# points its gpuipc-plugin-api dependency at this checkout's plugin-api by absolute path. The
# sepia filter inside is a working example to change: build with `cargo build --release` in DIR
# and run DIR/pipeline.toml as it says.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 NAME DIR   (NAME: lower-case letters, digits and '-', starting with a letter)" >&2
    exit 2
fi
name=$1 dir=$2
if ! [[ $name =~ ^[a-z][a-z0-9-]*$ ]]; then
    echo "$0: plugin name '$name': use lower-case letters, digits and '-', starting with a letter" >&2
    exit 2
fi
if [ -e "$dir" ]; then
    echo "$0: $dir exists; give a new folder" >&2
    exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
template=$repo/plugin-api/template
mkdir -p "$dir"
# The template's own files only, never a build of it made in place.
(cd "$template" && tar --exclude=./target --exclude=./Cargo.lock -cf - .) | (cd "$dir" && tar -xf -)
printf '/target\n' > "$dir/.gitignore"
api=$repo/plugin-api
lib=libgpuipc_${name//-/_}.so
sed -i \
    -e "s|^name = \"gpuipc-sepia\" .*|name = \"gpuipc-$name\"              # the library is $lib: \`plugin = \"$name\"\`|" \
    -e "s|^gpuipc-plugin-api = { path = \"..\" }|gpuipc-plugin-api = { path = \"$api\" }|" \
    "$dir/Cargo.toml"
sed -i -e "s|name: \"sepia\",|name: \"$name\",|" "$dir/src/sepia.rs"
sed -i -e "s|^//! plugin = \"sepia\"|//! plugin = \"$name\"|" "$dir/src/lib.rs"
sed -i -e "s|libgpuipc_sepia\.so|$lib|g" -e "s|plugin = \"sepia\"|plugin = \"$name\"|g" "$dir/pipeline.toml"
grep -q "name = \"gpuipc-$name\"" "$dir/Cargo.toml" && grep -q "path = \"$api\"" "$dir/Cargo.toml" ||
    { echo "$0: could not rename the template's Cargo.toml" >&2; exit 1; }
echo "made $dir: plugin '$name' (crate gpuipc-$name, $lib) from the sepia template"
echo "next: cd $dir && cargo test && cargo build --release"
echo "      GPUIPC_PLUGIN_PATH=target/release $repo/target/release/gpuipc-host run pipeline.toml"
