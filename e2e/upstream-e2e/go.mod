module github.com/kcm-rs/kcm-rs/e2e/upstream-e2e

go 1.24.0
