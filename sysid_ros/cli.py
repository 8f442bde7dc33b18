"""The `sysid` command line: `sysid verify`, `sysid fit`, `sysid demo`."""

from __future__ import annotations

import argparse
import sys

# Subcommand modules import JAX lazily so `sysid --help` stays fast; float64 is switched on
# here, at the entry point, never inside the core.


def _enable_x64():
    import jax
    jax.config.update('jax_enable_x64', True)


def _cmd_verify(args) -> int:
    from sysid_ros.core import builders
    from sysid_ros.io import model_io, verify

    if args.urdf:
        pmodel = model_io.load_pinocchio(args.urdf, keep_joints=args.joints)
        model, params = model_io.from_pinocchio(pmodel)
        targets = [(model, params, pmodel)]
    else:
        names = sorted(builders.BUILDERS) if args.builder == 'all' else [args.builder]
        targets = [(*builders.BUILDERS[n](**({'num_links': 4} if n == 'chain' else {})), None)
                   for n in names]
    ok = True
    for model, params, pmodel in targets:
        report = verify.verify(model, params, pmodel, num_samples=args.samples, seed=args.seed)
        print(report.table())
        ok &= report.passed
    print('PASSED' if ok else f'FAILED: an error exceeds {verify.TOLERANCE:g}')
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='sysid', description='Identify dynamic parameters of robots (sysid_ros).')
    sub = parser.add_subparsers(dest='command', required=True)

    p = sub.add_parser('verify', help='check the JAX dynamics of a model against Pinocchio')
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument('--urdf', help='URDF file (or example-robot-data:NAME, e.g. '
                     'example-robot-data:panda)')
    from sysid_ros.core.builders import BUILDERS
    src.add_argument('--builder', choices=sorted(BUILDERS) + ['all'],
                     help='a built-in model of the seeds (or all of them)')
    p.add_argument('--joints', nargs='+', help='keep only these joints (lock the others)')
    p.add_argument('--samples', type=int, default=20, help='random states (default 20)')
    p.add_argument('--seed', type=int, default=0)
    p.set_defaults(func=_cmd_verify)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    _enable_x64()
    from sysid_ros.io.errors import InputError
    try:
        return args.func(args)
    except InputError as exc:
        print(f'sysid {args.command}: error: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f'sysid {args.command}: interrupted', file=sys.stderr)
        return 130


if __name__ == '__main__':
    sys.exit(main())
