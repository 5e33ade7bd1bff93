"""`python -m headsize_tf` runs the `headsize-tf` command line."""

from headsize_tf.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
