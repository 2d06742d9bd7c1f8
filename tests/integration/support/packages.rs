//! Registry packages built in the test: provider tarballs, good and hostile. They are
//! unsigned; `support::signing` signs them.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;

pub const PROVIDER_YAML: &str = "id: evil\nname: evil\nproviderServices:\n  things:\n    id: things:v1\n    name: things\n    title: TITLE\n    description: things\n    preferred: true\n    service:\n      $ref: evil/v1/services/things.yaml\n";

pub enum Item {
    Dir(&'static str),
    File(&'static str, Vec<u8>),
    /// A name written straight into the header, bypassing the builder's checks.
    RawName(&'static str, Vec<u8>),
    Symlink(&'static str, &'static str),
    Hardlink(&'static str, &'static str),
    Fifo(&'static str),
}

pub fn tgz(items: Vec<Item>) -> Vec<u8> {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::best()));
    for item in items {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        match item {
            Item::Dir(path) => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder
                    .append_data(&mut header, path, std::io::empty())
                    .unwrap();
            }
            Item::File(path, data) => {
                header.set_size(data.len() as u64);
                builder
                    .append_data(&mut header, path, data.as_slice())
                    .unwrap();
            }
            Item::RawName(path, data) => {
                header.set_size(data.len() as u64);
                let name = &mut header.as_old_mut().name;
                name[..path.len()].copy_from_slice(path.as_bytes());
                header.set_cksum();
                builder.append(&header, data.as_slice()).unwrap();
            }
            Item::Symlink(path, target) | Item::Hardlink(path, target) => {
                let kind = if matches!(item, Item::Symlink(..)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                };
                header.set_entry_type(kind);
                header.set_size(0);
                builder.append_link(&mut header, path, target).unwrap();
            }
            Item::Fifo(path) => {
                header.set_entry_type(tar::EntryType::Fifo);
                header.set_size(0);
                builder
                    .append_data(&mut header, path, std::io::empty())
                    .unwrap();
            }
        }
    }
    let mut gz = builder.into_inner().unwrap();
    gz.flush().unwrap();
    gz.finish().unwrap()
}

pub fn good_items(title: &str) -> Vec<Item> {
    vec![
        Item::Dir("v1/"),
        Item::File(
            "v1/provider.yaml",
            PROVIDER_YAML.replace("TITLE", title).into_bytes(),
        ),
        Item::File(
            "v1/services/things.yaml",
            b"openapi: 3.0.0\ninfo: {title: t, version: v1}\npaths: {}\ncomponents:\n  x-stackQL-resources: {}\n".to_vec(),
        ),
    ]
}

/// Serves the compat registry's `dist/` at `<mock><base>/dist/`: its index and google's two
/// packages (v0.1.2, v0.2.1), each package's bytes passed through `package` (re-signed by
/// the test root, or as published).
pub fn serve_compat_dist(
    mock: &crate::mock::Mock,
    base: &str,
    dist: &std::path::Path,
    package: impl Fn(&[u8]) -> Vec<u8>,
) {
    use crate::mock::Reply;
    mock.route(
        &format!("{base}/dist/providers.yaml"),
        Reply::bytes(
            "application/yaml",
            std::fs::read(dist.join("providers.yaml")).unwrap(),
        ),
    );
    for version in ["v0.1.2", "v0.2.1"] {
        let bytes = std::fs::read(dist.join(format!("googleapis.com/{version}.tgz"))).unwrap();
        mock.route(
            &format!("{base}/dist/googleapis.com/{version}.tgz"),
            Reply::bytes("application/gzip", package(&bytes)),
        );
    }
}
