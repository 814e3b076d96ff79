// Default preferences of the desktop template's Firefox ESR (next to policies.json, which
// cannot set these). A sandbox cannot give Firefox user namespaces for its own sandbox
// layer (seccomp still applies); the warning bar about it would only confuse a model.
pref("security.sandbox.warn_unprivileged_namespaces", false);
pref("browser.toolbars.bookmarks.visibility", "never");
