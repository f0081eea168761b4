"""Reads the Parquet parts under an S3 prefix with pyarrow's own S3 client (not reignpipe's),
as a data-lake reader would, and prints what it saw as one JSON object.

    read_s3_parquet.py ENDPOINT BUCKET/PREFIX

Credentials and region come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION.
"""
import json
import os
import sys
from urllib.parse import urlparse

import pyarrow.dataset as ds
import pyarrow.fs as pafs


def main():
    endpoint, prefix = sys.argv[1], sys.argv[2]
    u = urlparse(endpoint)
    fs = pafs.S3FileSystem(
        access_key=os.environ["AWS_ACCESS_KEY_ID"],
        secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        region=os.environ.get("AWS_REGION", "us-east-1"),
        endpoint_override=u.netloc,
        scheme=u.scheme,
        force_virtual_addressing=False,
    )
    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=False))
    files = sorted(i.path for i in infos if i.type == pafs.FileType.File)
    # pyarrow's dataset discovery skips hidden files (the checksums) as a lake reader does.
    d = ds.dataset(prefix, filesystem=fs, format="parquet")
    t = d.to_table()
    print(json.dumps({
        "files": files,
        "dataset_files": sorted(d.files),
        "rows": t.num_rows,
        "doc_ids": t.column("doc_id").to_pylist(),
        "versions": t.column("version").to_pylist(),
        "vector_type": str(t.schema.field("vector").type),
    }))


if __name__ == "__main__":
    main()
