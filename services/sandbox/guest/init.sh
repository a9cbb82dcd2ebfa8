#!/bin/sh
# PID 1 of the busybox image: mount, load virtio modules in dependency order, optional
# network, then keep the guest agent running on the virtio-serial port.
# With k3s.root=/dev/vdX on the kernel command line (the Debian image), the disk is mounted
# and becomes / (switch_root); busybox and the agent run from a tmpfs at /run/k3s there.
if [ "$1" = "stage2" ]; then
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  while [ ! -e /dev/vport0p1 ]; do sleep 0.02; done
  while true; do
    /run/k3s/k3s-agent /dev/vport0p1
    sleep 0.2
  done
fi
/bin/busybox --install -s /bin
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mkdir -p /proc /sys /dev /tmp /run /home/user /data
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
for m in virtio_ring virtio virtio_mmio virtio_console virtio_blk virtio_balloon failover net_failover virtio_net; do
  [ -f /lib/modules/$m.ko ] && insmod /lib/modules/$m.ko 2>/dev/null
done
hostname sandbox
ip link set lo up 2>/dev/null
if [ -e /sys/class/net/eth0 ]; then
  # QEMU user-mode network: fixed addresses, no DHCP round trip at boot.
  ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
  echo "nameserver 10.0.2.3" > /etc/resolv.conf
fi
root=""
for arg in $(cat /proc/cmdline); do
  case "$arg" in k3s.root=*) root="${arg#k3s.root=}" ;; esac
done
if [ -n "$root" ]; then
  i=0
  while [ ! -b "$root" ] && [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done
  mkdir -p /newroot
  if mount -t ext4 "$root" /newroot; then
    mkdir -p /newroot/run /newroot/proc /newroot/sys /newroot/dev /newroot/home/user
    mount -t tmpfs -o mode=755 tmpfs /newroot/run
    mkdir -p /newroot/run/k3s
    cp /bin/busybox /sbin/k3s-agent /newroot/run/k3s/
    cp /init /newroot/run/k3s/init.sh
    [ -e /sys/class/net/eth0 ] && cp /etc/resolv.conf /newroot/etc/resolv.conf
    mount --move /dev /newroot/dev
    mount --move /proc /newroot/proc
    mount --move /sys /newroot/sys
    exec switch_root /newroot /run/k3s/busybox sh /run/k3s/init.sh stage2
  fi
  echo "k3s-init: cannot mount $root; staying in the initramfs" > /dev/console
fi
if [ -b /dev/vda ]; then mount /dev/vda /data 2>/dev/null; fi
while [ ! -e /dev/vport0p1 ]; do sleep 0.02; done
while true; do
  /sbin/k3s-agent /dev/vport0p1
  sleep 0.2
done
