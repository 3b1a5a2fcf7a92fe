#!/bin/sh
# Joins the Redis Cluster's nodes into one cluster, once (a one-shot job: compose's
# `redis-cluster-init`, the k8s overlay's Job `redis-cluster-init`).
#
#   REDIS_CLUSTER_NODES="redis-node-0:6379 redis-node-1:6379 ..."   every node, space-separated
#   REDIS_CLUSTER_REPLICAS=1     replicas per primary (primaries = nodes / (1 + replicas))
#   REDIS_CLUSTER_WAIT_S=120     how long to wait for the nodes to answer, then for cluster_state:ok
#
# It waits until every node answers PING, exits 0 at once when the first node already
# reports cluster_state:ok (the job ran before: a restart or a second `up` changes nothing),
# resolves the names to addresses (CLUSTER MEET takes addresses) and runs
# `redis-cli --cluster create`, then waits for cluster_state:ok on every node. Nodes that
# hold data or another cluster's config make `--cluster create` fail: the job fails, naming
# the node, and nothing is changed (remove their volumes to start from scratch).
set -eu

nodes=${REDIS_CLUSTER_NODES:?set REDIS_CLUSTER_NODES to the nodes, e.g. "redis-node-0:6379 redis-node-1:6379 ..."}
replicas=${REDIS_CLUSTER_REPLICAS:-0}
wait_s=${REDIS_CLUSTER_WAIT_S:-120}

host_of() { echo "${1%:*}"; }
port_of() { echo "${1##*:}"; }
cli() { node=$1; shift; redis-cli -h "$(host_of "$node")" -p "$(port_of "$node")" "$@"; }

waited=0
for node in $nodes; do
  until cli "$node" ping 2>/dev/null | grep -q PONG; do
    waited=$((waited + 1))
    if [ "$waited" -gt "$wait_s" ]; then
      echo "create-cluster: $node did not answer PING within ${wait_s} s" >&2
      exit 1
    fi
    sleep 1
  done
done

first=${nodes%% *}
if cli "$first" cluster info | grep -q '^cluster_state:ok'; then
  echo "create-cluster: $first already reports cluster_state:ok; nothing to do"
  exit 0
fi

addresses=""
for node in $nodes; do
  host=$(host_of "$node")
  address=$(getent hosts "$host" | awk '{ print $1; exit }')
  addresses="$addresses ${address:-$host}:$(port_of "$node")"
done

# shellcheck disable=SC2086  # one argument per node
redis-cli --cluster create $addresses --cluster-replicas "$replicas" --cluster-yes

waited=0
for node in $nodes; do
  until cli "$node" cluster info | grep -q '^cluster_state:ok'; do
    waited=$((waited + 1))
    if [ "$waited" -gt "$wait_s" ]; then
      echo "create-cluster: $node not cluster_state:ok within ${wait_s} s" >&2
      exit 1
    fi
    sleep 1
  done
done
echo "create-cluster: cluster_state:ok on every node ($addresses )"
