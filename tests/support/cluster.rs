//! A Redis Cluster on loopback: real servers with the module, joined by
//! `redis-cli --cluster create`, resharded by `redis-cli --cluster reshard`, and failed
//! over by `CLUSTER FAILOVER`, each step waited for with bounded retries.

use std::process::Command;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterConnection};

use super::{cli_binary, query, wait_until, Server};

/// How long the cluster may take to agree on a change.
const AGREEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Every server of a cluster, masters and replicas.
pub struct Cluster {
    /// The nodes, in the order they were started.
    pub nodes: Vec<Server>,
}

/// What a node says of itself in `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct NodeEntry {
    /// Its id.
    pub id: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The id of its master, for a replica.
    pub master_id: Option<String>,
    /// How many slots it serves.
    pub slots: usize,
}

impl Cluster {
    /// `masters` masters with `replicas` replicas each, every slot assigned and every node
    /// agreeing.
    pub fn start(masters: usize, replicas: usize) -> Cluster {
        let nodes = cluster_nodes(masters * (1 + replicas));
        let mut create = vec!["--cluster".to_owned(), "create".to_owned()];
        create.extend(
            nodes
                .iter()
                .map(|node| format!("127.0.0.1:{}", node.port())),
        );
        create.extend(["--cluster-replicas".to_owned(), replicas.to_string()]);
        create.push("--cluster-yes".to_owned());
        let cluster = Cluster { nodes };
        cluster.redis_cli(&create);
        cluster.wait_for_agreement();
        cluster
    }

    /// Two masters without replicas, made by hand (`redis-cli --cluster create` wants three
    /// masters): the first serves `first_slot..=16383`, the second `0..first_slot`, so
    /// `first_slot` is the first node's lowest, the one `redis-cli --cluster reshard` moves
    /// first. `first_slot` must be above 0.
    pub fn start_two(first_slot: u16) -> Cluster {
        assert!(first_slot > 0);
        let nodes = cluster_nodes(2);
        let ranges = [(first_slot, 16_383), (0, first_slot - 1)];
        for (node, (first, last)) in nodes.iter().zip(ranges) {
            let _: () = query(
                &mut node.connect(),
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &first.to_string(),
                    &last.to_string(),
                ],
            );
        }
        let port = nodes[1].port().to_string();
        let _: () = query(
            &mut nodes[0].connect(),
            &["CLUSTER", "MEET", "127.0.0.1", &port],
        );
        let cluster = Cluster { nodes };
        cluster.wait_for_agreement();
        cluster
    }

    /// The id of the node on `port`.
    pub fn id(&self, port: u16) -> String {
        query(&mut self.node(port).connect(), &["CLUSTER", "MYID"])
    }

    /// The port of the master that serves `slot`, as the node on `port` sees it; `None`
    /// when it sees none, or does not answer (yet).
    pub fn owner(&self, port: u16, slot: u16) -> Option<u16> {
        let shards = try_cluster(self.node(port), "NODES")?;
        shards.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let serves = fields[8..].iter().any(|range| match range.split_once('-') {
                Some((first, last)) => {
                    (first.parse().unwrap_or(u16::MAX)..=last.parse().unwrap_or(0)).contains(&slot)
                }
                None => range.parse() == Ok(slot),
            });
            serves.then(|| parse_node_line(line).port)
        })
    }

    /// Waits (bounded) until every node sees the master on `port` serve `slot`, and the
    /// cluster agrees.
    pub fn wait_for_owner(&self, slot: u16, port: u16) {
        let moved = wait_until(AGREEMENT_TIMEOUT, || {
            self.nodes
                .iter()
                .all(|node| self.owner(node.port(), slot) == Some(port))
        });
        assert!(moved, "slot {slot} did not move to {port}: {}", self.logs());
        self.wait_for_agreement();
    }

    /// A cluster-aware connection, which follows `MOVED` and `ASK` redirections.
    pub fn connect(&self) -> ClusterConnection {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("redis://127.0.0.1:{}/", node.port()))
            .collect();
        ClusterClient::builder(urls)
            .retries(10)
            .response_timeout(Duration::from_secs(30))
            .build()
            .and_then(|client| client.get_connection())
            .unwrap_or_else(|error| panic!("cannot connect to the cluster: {error}"))
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> &Server {
        self.nodes
            .iter()
            .find(|node| node.port() == port)
            .expect("a node of this cluster")
    }

    /// The cluster's nodes as the node on `port` sees them.
    pub fn entries(&self, port: u16) -> Vec<NodeEntry> {
        let nodes: String = query(&mut self.node(port).connect(), &["CLUSTER", "NODES"]);
        nodes.lines().map(parse_node_line).collect()
    }

    /// [`Cluster::entries`], or `None` when the node does not answer (yet): a node busy
    /// applying a new configuration may not answer for a while.
    fn try_entries(&self, port: u16) -> Option<Vec<NodeEntry>> {
        let nodes = try_cluster(self.node(port), "NODES")?;
        Some(nodes.lines().map(parse_node_line).collect())
    }

    /// The masters that serve slots, as the first node sees them.
    pub fn masters(&self) -> Vec<NodeEntry> {
        let mut masters: Vec<NodeEntry> = self
            .entries(self.nodes[0].port())
            .into_iter()
            .filter(|entry| entry.master_id.is_none() && entry.slots > 0)
            .collect();
        masters.sort_by_key(|entry| entry.port);
        masters
    }

    /// Moves every slot of `from` to `to` with `redis-cli --cluster reshard`, keys and all.
    pub fn reshard(&self, from: &NodeEntry, to: &NodeEntry) {
        self.reshard_slots(from, to, from.slots);
    }

    /// Moves the `slots` lowest slots of `from` to `to` with `redis-cli --cluster reshard`,
    /// which uses atomic slot migration where every node has it (Redis 8.4+), `MIGRATE`
    /// key by key otherwise.
    pub fn reshard_slots(&self, from: &NodeEntry, to: &NodeEntry, slots: usize) {
        self.redis_cli(&[
            "--cluster".to_owned(),
            "reshard".to_owned(),
            format!("127.0.0.1:{}", to.port),
            "--cluster-from".to_owned(),
            from.id.clone(),
            "--cluster-to".to_owned(),
            to.id.clone(),
            "--cluster-slots".to_owned(),
            slots.to_string(),
            "--cluster-pipeline".to_owned(),
            "100".to_owned(),
            "--cluster-yes".to_owned(),
        ]);
        self.wait_for_agreement();
    }

    /// Promotes `replica` with `CLUSTER FAILOVER` (coordinated with its master, so that it
    /// has every write first), and waits until every node sees it as a master.
    pub fn failover(&self, replica: &NodeEntry) {
        let _: () = query(
            &mut self.node(replica.port).connect(),
            &["CLUSTER", "FAILOVER"],
        );
        let promoted = wait_until(AGREEMENT_TIMEOUT, || {
            self.nodes.iter().all(|node| {
                self.try_entries(node.port()).is_some_and(|entries| {
                    entries
                        .iter()
                        .any(|entry| entry.id == replica.id && entry.master_id.is_none())
                })
            })
        });
        assert!(promoted, "the failover did not happen: {}", self.logs());
        self.wait_for_agreement();
    }

    /// Waits (bounded) until every node reports a healthy cluster with every slot served,
    /// and the same view of who serves what.
    pub fn wait_for_agreement(&self) {
        let agreed = wait_until(AGREEMENT_TIMEOUT, || {
            // A node that does not answer yet is "not yet", until the wait's bound.
            let healthy = self.nodes.iter().all(|node| {
                try_cluster(node, "INFO").is_some_and(|info| {
                    info.contains("cluster_state:ok")
                        && info.contains("cluster_slots_ok:16384")
                        && info.contains(&format!("cluster_known_nodes:{}", self.nodes.len()))
                })
            });
            healthy && {
                let views = self
                    .nodes
                    .iter()
                    .map(|node| {
                        let mut view: Vec<_> = self
                            .try_entries(node.port())?
                            .into_iter()
                            .map(|entry| (entry.id, entry.master_id, entry.slots))
                            .collect();
                        view.sort();
                        Some(view)
                    })
                    .collect::<Option<Vec<_>>>();
                views.is_some_and(|views| views.windows(2).all(|pair| pair[0] == pair[1]))
            }
        });
        assert!(agreed, "the cluster did not agree: {}", self.logs());
    }

    /// Runs redis-cli with `args`, and fails with its output if it fails.
    fn redis_cli(&self, args: &[String]) {
        let output = Command::new(cli_binary())
            .args(args)
            .output()
            .expect("redis-cli could not be run: is it installed? (`make test` installs it)");
        assert!(
            output.status.success(),
            "redis-cli {} failed:\n{}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Every node's log.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|node| format!("--- node {} ---\n{}", node.port(), node.log()))
            .collect()
    }
}

/// One line of `CLUSTER NODES`: `<id> <ip:port@cport> <flags> <master> <ping> <pong>
/// <epoch> <link> <slot> <slot> ...`, where a slot is a number or a range `a-b`.
fn parse_node_line(line: &str) -> NodeEntry {
    let fields: Vec<&str> = line.split(' ').collect();
    let address = fields[1].split('@').next().unwrap();
    let port = address.rsplit(':').next().unwrap().parse().unwrap();
    let slots = fields[8..]
        .iter()
        .filter(|slot| !slot.starts_with('['))
        .map(|slot| match slot.split_once('-') {
            Some((first, last)) => {
                last.parse::<usize>().unwrap() - first.parse::<usize>().unwrap() + 1
            }
            None => 1,
        })
        .sum();
    NodeEntry {
        id: fields[0].to_owned(),
        port,
        master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
        slots,
    }
}

/// `count` servers in cluster mode, not yet joined.
fn cluster_nodes(count: usize) -> Vec<Server> {
    (0..count)
        .map(|_| {
            Server::builder()
                .arg("cluster-enabled", "yes")
                .arg("cluster-node-timeout", "5000")
                .start()
        })
        .collect()
}

/// `CLUSTER <subcommand>` on `node`, or `None` when the node does not answer (yet).
fn try_cluster(node: &Server, subcommand: &str) -> Option<String> {
    let mut con = node.try_connect().ok()?;
    redis::cmd("CLUSTER").arg(subcommand).query(&mut con).ok()
}
