"""Build script for the opolo_ros ament_python package (colcon build, pip install)."""

from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = 'opolo_ros'
HERE = Path(__file__).resolve().parent


def share_tree(folder: str) -> list[tuple[str, list[str]]]:
    """data_files entries installing every file under `folder` into share/<package>/<folder>/...

    Sub-folders are kept (models/experts, models/demos/<task>). Hidden files (.gitkeep, the
    temporary files of an atomic model write) are skipped, so an empty folder installs nothing.
    """
    by_dir: dict[str, list[str]] = {}
    root = HERE / folder
    for path in sorted(root.rglob('*')):
        rel = path.relative_to(HERE)
        if not path.is_file() or any(part.startswith('.') or part == '__pycache__' for part in rel.parts):
            continue
        by_dir.setdefault(str(Path('share', PACKAGE, rel.parent)), []).append(rel.as_posix())
    return sorted(by_dir.items())


setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*']),
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{PACKAGE}']),
        (f'share/{PACKAGE}', ['package.xml']),
        *share_tree('launch'),
        *share_tree('config'),
        *share_tree('models'),
    ],
    install_requires=['setuptools'],
    python_requires='>=3.10',
    zip_safe=True,
    maintainer='opolo_ros maintainers',
    maintainer_email='maintainers@opolo-ros.invalid',
    description='Off-Policy Learning from Observations (OPOLO) for ROS 2, with ONNX policy deployment.',
    license='Apache-2.0',
    extras_require={'test': ['pytest', 'hypothesis']},
    entry_points={
        'console_scripts': [
            'opolo-ros = opolo_ros.cli:main',
            'sim_bridge = opolo_ros.nodes.sim_bridge:main',
            'actor = opolo_ros.nodes.actor:main',
            'learner = opolo_ros.nodes.learner:main',
            'demo_recorder = opolo_ros.nodes.demo_recorder:main',
            'demo_player = opolo_ros.nodes.demo_player:main',
            'topic_recorder = opolo_ros.nodes.topic_recorder:main',
        ],
    },
)
