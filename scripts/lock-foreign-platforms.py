#!/usr/bin/env python3
"""Adds package-lock entries for optional platform binaries the registry mirror does not serve.

`npm install` leaves out an optional dependency it cannot resolve (here: the macOS, Windows
and exotic-Linux builds of native packages), and `npm ci` then refuses the lock as out of
sync. Each entry added here names the package, the version its parent asks for and the
platform it is for; `npm ci` skips it on every other platform without fetching anything.
Usage: scripts/lock-foreign-platforms.py <file with one missing package name per line>
"""
import json
import re
import sys

OS = ['darwin', 'win32', 'linux', 'android', 'freebsd', 'openharmony']
CPU = [('arm64', 'arm64'), ('x64', 'x64'), ('ia32', 'ia32'), ('ppc64', 'ppc64'), ('s390x', 's390x'),
       ('riscv64', 'riscv64'), ('loong64', 'loong64'), ('arm', 'arm')]

missing = [line.strip() for line in open(sys.argv[1]) if line.strip()]
lock = json.load(open('package-lock.json'))
packages = lock['packages']

for name in missing:
    parent_key, version = None, None
    for key, entry in packages.items():
        wanted = entry.get('optionalDependencies', {}).get(name)
        if wanted is not None:
            parent_key, version = key, wanted
            break
    if version is None:
        sys.exit(f'no parent asks for {name}')
    tail = name.split('/')[-1]
    parts = re.split(r'[-_]', tail)
    os_name = next((o for o in OS if o in parts), None)
    cpu = next((c for token, c in CPU if token in parts), None)
    if os_name is None or cpu is None:
        sys.exit(f'cannot tell the platform of {name}')
    entry = {'version': version, 'cpu': [cpu], 'optional': True, 'os': [os_name]}
    if packages[parent_key].get('dev'):
        entry['dev'] = True
    packages[f'node_modules/{name}'] = entry

lock['packages'] = dict(sorted(packages.items(), key=lambda kv: (kv[0] != '', kv[0])))
with open('package-lock.json', 'w') as out:
    json.dump(lock, out, indent=2)
    out.write('\n')
