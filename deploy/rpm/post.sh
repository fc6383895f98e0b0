# %systemd_post stallwatch.service: on first installation, enable the unit if
# the system's presets say so (RPM distributions leave services off by
# default: `systemctl enable --now stallwatch`).
if [ "$1" -eq 1 ]; then
    if [ -x /usr/lib/systemd/systemd-update-helper ]; then
        /usr/lib/systemd/systemd-update-helper install-system-units stallwatch.service || :
    else
        systemctl --no-reload preset stallwatch.service >/dev/null 2>&1 || :
    fi
fi
