"Package metadata read from settings.ini, as in every nbdev 2 project (without pkg_resources, which new setuptools lacks)."
import shlex
from configparser import ConfigParser

import setuptools

assert setuptools.__version__ >= '36.2'

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

cfg_keys = 'version description keywords author author_email'.split()
expected = cfg_keys + "lib_name user branch license status min_python audience language".split()
for o in expected: assert o in cfg, "missing expected setting: {}".format(o)
setup_cfg = {o: cfg[o] for o in cfg_keys}

# SPDX identifiers: setuptools deprecates the "License ::" classifiers in their favour.
licenses = {'apache2': ('Apache-2.0', None), 'mit': ('MIT', None)}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = '3.11'.split()  # the versions `make test` has passed on (CONTRIBUTING.md)

requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
lic = licenses.get(cfg['license'].lower(), (cfg['license'], None))
min_python = cfg['min_python']
min_python_tuple = tuple(int(p) for p in min_python.split('.'))
entry_points = cfg.get('console_scripts', '').strip()

setuptools.setup(
    name=cfg['lib_name'],
    license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status']) - 1],  # 3: "3 - Alpha"
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'Natural Language :: ' + cfg['language'].title()]
        + ['Programming Language :: Python :: ' + o for o in py_versions
           if tuple(int(p) for p in o.split('.')) >= min_python_tuple]
        + (['License :: ' + lic[1]] if lic[1] else []),
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=[cfg['lib_name'], cfg['lib_name'] + '.*']),
    include_package_data=True,
    package_data={cfg['lib_name']: ['py.typed', 'explorer.js', 'explorer.css']},  # type hints, explorer assets
    install_requires=requirements,
    extras_require={'dev': dev_requirements, 'plot': shlex.split(cfg.get('plot_requirements', '')),
                    'exercises': shlex.split(cfg.get('exercises_requirements', '')),
                    'numbers': shlex.split(cfg.get('numbers_requirements', '')),
                    'bench': shlex.split(cfg.get('bench_requirements', '')),
                    'modern': shlex.split(cfg.get('modern_requirements', ''))},
    dependency_links=cfg.get('dep_links', '').split(),
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={
        'console_scripts': entry_points.split() if entry_points else [],
        'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d'],
    },
    **setup_cfg)
