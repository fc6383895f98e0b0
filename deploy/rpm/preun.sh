# %systemd_preun stallwatch.service: on removal (not on upgrade), disable and
# stop the unit.
if [ "$1" -eq 0 ]; then
    if [ -x /usr/lib/systemd/systemd-update-helper ]; then
        /usr/lib/systemd/systemd-update-helper remove-system-units stallwatch.service || :
    else
        systemctl --no-reload disable --now stallwatch.service >/dev/null 2>&1 || :
    fi
fi
