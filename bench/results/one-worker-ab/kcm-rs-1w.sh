#!/bin/sh
TOKIO_WORKER_THREADS=1 exec /work/main/target/release/kcm-rs "$@"
