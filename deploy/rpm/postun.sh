# %systemd_postun_with_restart stallwatch.service: after an upgrade, reload
# the units and restart the daemon if it was running.
if [ "$1" -ge 1 ]; then
    if [ -x /usr/lib/systemd/systemd-update-helper ]; then
        /usr/lib/systemd/systemd-update-helper mark-restart-system-units stallwatch.service || :
    else
        systemctl daemon-reload >/dev/null 2>&1 || :
        systemctl try-restart stallwatch.service >/dev/null 2>&1 || :
    fi
fi
