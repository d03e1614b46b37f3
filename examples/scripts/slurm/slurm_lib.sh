# Shared by the Slurm jobs in this folder; sourced, not run (the tests source it too).

# ipv4_of_iface IFACE: the first IPv4 address of network interface IFACE, or nothing.
ipv4_of_iface() {
  { ip -4 -o addr show dev "$1" 2>/dev/null || true; } | awk '{split($4, a, "/"); print a[1]; exit}'
}

# first_routable_ipv4 ADDRESS...: the first IPv4 address that is not loopback (127.x: a
# Debian-style /etc/hosts maps the hostname to 127.0.1.1) nor link-local (169.254.x).
first_routable_ipv4() {
  local a
  for a in "$@"; do
    [[ $a =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ && $a != 127.* && $a != 169.254.* ]] && { echo "$a"; return 0; }
  done
  return 0
}

# ray_head_ip HEAD: the address the Ray workers reach node HEAD at. In order:
#   RAY_HEAD_IP (as given);
#   RAY_HEAD_IFACE, else NCCL_SOCKET_IFNAME (its first name, without a leading ^ or =), on
#     the head node: that interface's IPv4 address, the network NCCL is told to use;
#   the head's name as the cluster resolves it (getent ahostsv4), 127.x left out;
#   the head's own addresses (hostname -I on it, through srun), 127.x left out.
# `hostname --ip-address` is not used: it gives 127.0.1.1 on many images, or several
# addresses. Prints nothing when every way fails.
ray_head_ip() {
  local head=$1 iface ip=""
  if [[ -n ${RAY_HEAD_IP:-} ]]; then echo "$RAY_HEAD_IP"; return 0; fi
  iface=${RAY_HEAD_IFACE:-}
  if [[ -z $iface && -n ${NCCL_SOCKET_IFNAME:-} && $NCCL_SOCKET_IFNAME != ^* ]]; then  # ^: names to avoid
    iface=${NCCL_SOCKET_IFNAME%%,*}
    iface=${iface#=}
  fi
  if [[ -n $iface ]]; then
    ip=$(srun --overlap --nodes=1 --ntasks=1 -w "$head" bash -c "$(declare -f ipv4_of_iface); ipv4_of_iface $iface" \
      2>/dev/null || true)
  fi
  [[ -n $ip ]] || ip=$(first_routable_ipv4 $(getent ahostsv4 "$head" 2>/dev/null | awk '{print $1}' | uniq))
  [[ -n $ip ]] || ip=$(first_routable_ipv4 $(srun --overlap --nodes=1 --ntasks=1 -w "$head" hostname -I 2>/dev/null || true))
  echo "$ip"
}
