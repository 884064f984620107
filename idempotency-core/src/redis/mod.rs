//! Redis store and one-time tokens (single node and Cluster).
