#!/bin/sh
# The installer of the sandbox profiles (k8s/node/daemonset.yaml runs it on every node; k8s/README.md says why).
#
#   install-profiles.sh install   copy the profiles onto the node, load the AppArmor one, then re-check every
#                                 INTERVAL seconds (a node's /var/lib/kubelet or AppArmor policy can be reset)
#   install-profiles.sh check     exit 0 only if this node has both (the probes)
#
# Paths (the DaemonSet mounts them): PROFILES (the ConfigMap), SECCOMP_DIR (the node's
# /var/lib/kubelet/seccomp/profiles), APPARMOR_DIR (the node's /etc/apparmor.d). AppArmor is loaded with the NODE's
# own apparmor_parser (nsenter into pid 1's mount namespace: hostPID), so the rules match the node's kernel
# (AppArmor 4's `userns` rule on Ubuntu 24.04). A node without AppArmor (SELinux distributions) gets the seccomp
# profile only, and says so.
set -eu
PROFILES=${PROFILES:-/profiles}
SECCOMP_DIR=${SECCOMP_DIR:-/host/seccomp/profiles}
APPARMOR_DIR=${APPARMOR_DIR:-/host/apparmor.d}
SECCOMP=streamgrpo-sandbox.seccomp.json
APPARMOR=streamgrpo-sandbox
INTERVAL=${INTERVAL:-300}
READY=${READY:-/tmp/installed}  # the liveness probe checks it exists

apparmor_enabled() {
  [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = "Y" ]
}

apparmor_loaded() {
  nsenter --target 1 --mount -- cat /sys/kernel/security/apparmor/profiles 2>/dev/null \
    | grep -q "^$APPARMOR ("
}

seccomp_installed() {
  cmp -s "$PROFILES/$SECCOMP" "$SECCOMP_DIR/$SECCOMP"
}

check() {
  seccomp_installed || { echo "seccomp profile $SECCOMP_DIR/$SECCOMP missing or stale" >&2; return 1; }
  if apparmor_enabled; then
    apparmor_loaded || { echo "AppArmor profile $APPARMOR is not loaded" >&2; return 1; }
  fi
}

install_once() {
  mkdir -p "$SECCOMP_DIR"
  if ! seccomp_installed; then
    # atomic: kubelet never reads half a profile
    cp "$PROFILES/$SECCOMP" "$SECCOMP_DIR/.$SECCOMP.tmp"
    chmod 0644 "$SECCOMP_DIR/.$SECCOMP.tmp"
    mv "$SECCOMP_DIR/.$SECCOMP.tmp" "$SECCOMP_DIR/$SECCOMP"
    echo "installed seccomp profile $SECCOMP"
  fi
  if ! apparmor_enabled; then
    echo "AppArmor is not enabled on this node: seccomp only (pods that name localhost/$APPARMOR cannot run here;" \
         "k8s/README.md says how to drop the annotation)"
    return 0
  fi
  # AppArmor < 4 neither mediates user namespaces nor parses the `userns` rule: drop it there.
  if [ -e /sys/kernel/security/apparmor/features/namespaces/userns_create ] \
     || nsenter --target 1 --mount -- test -e /sys/kernel/security/apparmor/features/namespaces/userns_create; then
    cp "$PROFILES/$APPARMOR.apparmor" /tmp/profile
  else
    sed '/^[[:space:]]*userns,/d' "$PROFILES/$APPARMOR.apparmor" > /tmp/profile
  fi
  if ! cmp -s /tmp/profile "$APPARMOR_DIR/$APPARMOR" || ! apparmor_loaded; then
    cp /tmp/profile "$APPARMOR_DIR/.$APPARMOR.tmp"
    mv "$APPARMOR_DIR/.$APPARMOR.tmp" "$APPARMOR_DIR/$APPARMOR"
    nsenter --target 1 --mount -- apparmor_parser --replace --skip-cache "/etc/apparmor.d/$APPARMOR"
    echo "loaded AppArmor profile $APPARMOR"
  fi
  apparmor_loaded
}

case "${1:-}" in
  install)
    while :; do
      install_once
      touch "$READY"
      sleep "$INTERVAL"
    done
    ;;
  check) check ;;
  *) echo "usage: $0 install|check" >&2; exit 2 ;;
esac
